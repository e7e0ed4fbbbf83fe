package instrument_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
)

// Goroutines that share Do's context re-enter the lease, but one at a time:
// a second re-entry through the same hold waits (FailFast: ErrNotAcquired)
// until the first is released. Nesting below one's own hold goes straight in.
func TestGovern_GoroutinesSharingALeasesContextDoNotHoldItTogether(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := withTimeout(t, 20*time.Second)
	err := instrument.Do(ctx, f.locker, "lock:share", func(fctx context.Context) error {
		h1, err := f.locker.Acquire(fctx, "lock:share")
		if err != nil {
			return err
		}
		sibling := make(chan error, 1)
		go func() {
			_, err := f.locker.Acquire(fctx, "lock:share", instrument.FailFast())
			sibling <- err
		}()
		if err := <-sibling; !errors.Is(err, instrument.ErrNotAcquired) {
			t.Errorf("second goroutine re-entering through Do's context while the first holds: %v, want ErrNotAcquired", err)
		}
		nested, err := f.locker.Acquire(h1.Context(), "lock:share", instrument.FailFast())
		if err != nil {
			t.Fatalf("nested re-entry through the holder's own context: %v", err)
		}
		if nested.Fence() != h1.Fence() {
			t.Errorf("nested fence %d != %d", nested.Fence(), h1.Fence())
		}
		// h1 released before the hold nested in it: its place stays taken
		// until the nested hold is released too.
		if err := h1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := f.locker.Acquire(fctx, "lock:share", instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
			t.Errorf("re-entry while a hold nested in a released one is open: %v, want ErrNotAcquired", err)
		}
		waiter := make(chan error, 1)
		go func() {
			h, err := f.locker.Acquire(fctx, "lock:share")
			if err == nil {
				err = h.Release(ctx)
			}
			waiter <- err
		}()
		if err := nested.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-waiter; err != nil {
			t.Errorf("waiting re-entry after the holds were released: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.client.Exists(ctx, "lock:share").Val() != 0 {
		t.Fatal("lock left behind")
	}
}

// Workers that fn starts with its context and that each lock the key again
// never run their critical sections at once.
func TestDo_WorkersReenteringThroughFnsContextExcludeEachOther(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := withTimeout(t, 30*time.Second)
	var inside, entered atomic.Int32
	err := instrument.Do(ctx, f.locker, "lock:workers", func(fctx context.Context) error {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 25 {
					err := instrument.Do(fctx, f.locker, "lock:workers", func(context.Context) error {
						if n := inside.Add(1); n != 1 {
							t.Errorf("%d workers inside the lock at once", n)
						}
						entered.Add(1)
						inside.Add(-1)
						return nil
					})
					if err != nil {
						t.Errorf("worker Do: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if entered.Load() != 100 {
		t.Fatalf("%d of 100 critical sections ran", entered.Load())
	}
	if v := counter(t, f.reg, "lockgov_lock_acquire_total", map[string]string{"result": "reentered"}); v != 100 {
		t.Fatalf("reentered = %v, want 100", v)
	}
}
