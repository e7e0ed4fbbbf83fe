package fence

import (
	"errors"
	"fmt"
)

// ErrStaleFence means a fenced write was refused because the resource has
// already accepted a write with the same or a newer fence: the writer's lock
// was taken over (or this lease already wrote). Match it with errors.Is; get
// the fences with errors.As and *StaleFenceError.
var ErrStaleFence = errors.New("lockgov: stale fence")

// ErrNoFence means the offered fence is 0: the lease carries no fence (an
// adapter around a lock that has none). Nothing was written.
var ErrNoFence = errors.New("lockgov: fence 0: the lease has no fence")

// StaleFenceError is the error every fenced write returns when it is
// refused. It matches ErrStaleFence.
type StaleFenceError struct {
	// Store names where the write was refused: "redis", "sql", "etcd".
	Store string
	// Key is the resource key (Redis key, SQL row key, etcd key) written.
	Key string
	// Stored is the fence the resource holds: the last accepted write's for
	// Redis and SQL; for etcd, the create revision of the lock's current
	// holder entry (0 when the lock is free).
	Stored uint64
	// Offered is the fence the refused write carried.
	Offered uint64
}

// Error says which write was refused and why.
func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("lockgov: stale fence: %s write to %q with fence %d refused, stored fence %d", e.Store, e.Key, e.Offered, e.Stored)
}

// Is makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }
