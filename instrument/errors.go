package instrument

import (
	"errors"

	"github.com/lockgov/lockgov/instrument/internal/leasecore"
)

// Sentinel errors shared by every backend. Callers match them with errors.Is;
// backends wrap them with the key pattern and backend name for context.
var (
	// ErrNotAcquired means the lock was held by someone else when the wait
	// strategy gave up (fail-fast attempt, retries exhausted, deadline reached).
	ErrNotAcquired = errors.New("lockgov: lock not acquired")
	// ErrLockLost means the lease ended without Release: it expired, was
	// deleted, or was taken over. It is the cause on Lease.Context().
	ErrLockLost = leasecore.ErrLockLost
	// ErrNotHeld means Release or Refresh was called by a handle that does not
	// own the lock (any more).
	ErrNotHeld = leasecore.ErrNotHeld
	// ErrReleased is the cause on Lease.Context() after a normal Release.
	ErrReleased = leasecore.ErrReleased
	// ErrPolicy means a governance rule refused the call. The returned error
	// wraps both ErrPolicy and the rule's own error.
	ErrPolicy = errors.New("lockgov: policy violation")
	// ErrClockSkew means the clock-skew tier of this process rejects new locks.
	ErrClockSkew = errors.New("lockgov: clock skew too large")
	// ErrInvalidKey means a lock key is empty, too long or contains control
	// characters. Nothing was sent to the backend.
	ErrInvalidKey = errors.New("lockgov: invalid lock key")
	// ErrInvalidOption means an option carries a value that cannot work
	// (TTL <= 0, negative attempts, nil backoff, ...).
	ErrInvalidOption = errors.New("lockgov: invalid option")
)
