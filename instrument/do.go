package instrument

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// releaseTimeout bounds the Release that Do runs after fn, which must work
// even when the caller's context has already ended.
const releaseTimeout = 5 * time.Second

// Do acquires key, runs fn and releases the lock when fn returns or panics
// (the panic is re-raised after the release). fn's context carries the lease
// (so nested Do on the same key re-enters) and is cancelled with the lease's
// cause when the lock is lost while fn runs.
//
// If fn returns nil but the lock was lost meanwhile, Do returns an error
// wrapping ErrLockLost: the work ran, at least partly, without the lock.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...AcquireOption) (err error) {
	if l == nil {
		return fmt.Errorf("%w: instrument.Do: nil Locker", ErrInvalidOption)
	}
	if fn == nil {
		return fmt.Errorf("%w: instrument.Do: nil fn", ErrInvalidOption)
	}
	lease, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(ContextWithLease(ctx, lease))
	stop := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
	defer func() {
		stop()
		p := recover()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		rerr := lease.Release(rctx)
		rcancel()
		cancel(ErrReleased)
		if p != nil {
			panic(p)
		}
		lostCause := context.Cause(lease.Context())
		switch {
		case err != nil:
			if rerr != nil && !errors.Is(rerr, ErrNotHeld) {
				err = errors.Join(err, rerr)
			}
		case errors.Is(lostCause, ErrLockLost):
			err = fmt.Errorf("instrument: do: %w", lostCause)
		case rerr != nil:
			err = rerr
		}
	}()
	return fn(fnCtx)
}
