package instrument

import (
	"context"
)

// Locker acquires distributed locks. Implementations must be safe for
// concurrent use: goroutines acquiring the same key through one Locker never
// hold it at the same time.
type Locker interface {
	// Acquire takes the lock on key, waiting as the options say (by default
	// until ctx is done). It returns ErrNotAcquired (wrapped) when the wait
	// strategy gives up, ctx's error when ctx ends first, and a wrapped
	// transport error when the backend cannot be reached.
	Acquire(ctx context.Context, key string, opts ...AcquireOption) (Lease, error)
}

// Lease is one holder's claim on a lock.
type Lease interface {
	// Key is the key the lease was acquired on.
	Key() string
	// Fence is a number that strictly increases per key across all holders;
	// pass it to the protected resource so it can reject a stale holder.
	Fence() uint64
	// Context is cancelled when the lease ends, with cause ErrLockLost or
	// ErrReleased (see context.Cause). Work that must not run after a loss
	// uses this context and the fence.
	Context() context.Context
	// Refresh extends the lease by its TTL if, and only if, it is still the
	// owner; otherwise it returns ErrNotHeld and touches nothing.
	Refresh(ctx context.Context) error
	// Release gives the lock up if, and only if, it is still the owner;
	// otherwise it returns ErrNotHeld and touches nothing. It stops the
	// watchdog before it returns.
	Release(ctx context.Context) error
}

// LockerFunc is for backend authors: it adapts a function to the Locker
// interface.
type LockerFunc func(ctx context.Context, key string, opts ...AcquireOption) (Lease, error)

// Acquire calls f.
func (f LockerFunc) Acquire(ctx context.Context, key string, opts ...AcquireOption) (Lease, error) {
	return f(ctx, key, opts...)
}
