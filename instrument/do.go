package instrument

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgov/lockgov/instrument/internal/errchain"
)

// releaseTimeout bounds the Release that Do runs after fn, which must work
// even when the caller's context has already ended.
const releaseTimeout = 5 * time.Second

// Do acquires key, runs fn and releases the lock when fn returns or panics
// (the panic is re-raised after the release). fn's context carries the lease
// (so a nested Do or Acquire on the same key through the same Governed with
// that context re-enters, see the package doc on re-entrancy) and is
// cancelled with the lease's cause when the lock is lost while fn runs.
//
// What Do returns when fn returns nil:
//
//   - an error wrapping ErrLockLost if the lease had ended with ErrLockLost
//     by the time fn returned: the work ran, at least partly, without the
//     lock;
//   - an error wrapping ErrLockLost and ErrNotHeld if the release found the
//     lock no longer held: it was lost at a moment Do cannot place (deleted
//     by someone else, say), possibly while fn ran;
//   - the release's error if the release itself failed (a transport error,
//     a lost reply): fn ran under the lock, whose state after fn is unknown
//     and which the store's TTL frees if the release did not get through.
//     This is not ErrLockLost: a loss that happens after fn returned, such
//     as the lease ending because its release failed, did not happen while
//     fn ran.
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
		// Read before the release: whatever the release does to the lease
		// (a failed release ends it with ErrLockLost) happens after fn.
		lostCause := context.Cause(lease.Context())
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		rerr := lease.Release(rctx)
		rcancel()
		cancel(ErrReleased)
		if p != nil {
			panic(p)
		}
		switch {
		case err != nil:
			if rerr != nil && !errchain.Is(rerr, ErrNotHeld) {
				err = errors.Join(err, rerr)
			}
		case errors.Is(lostCause, ErrLockLost):
			err = fmt.Errorf("instrument: do: %w", lostCause)
		case errchain.Is(rerr, ErrNotHeld):
			err = fmt.Errorf("instrument: do: %w: the release found the lock gone: %w", ErrLockLost, rerr)
		case rerr != nil:
			err = rerr
		}
	}()
	return fn(fnCtx)
}
