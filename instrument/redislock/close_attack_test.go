package redislock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestClose_DuringAFairWaitLeavesNothingQueued: a Fair waiter queued
// behind another Locker's holder when its own Locker is closed returns
// ErrClosed, and takes its queue entry with it before it returns (the
// leave runs in the caller, on the caller's live context). The holder's
// Release then frees the lock: it is not handed to the closed waiter's
// token, where it would stand unused for its TTL (an hour here).
func TestClose_DuringAFairWaitLeavesNothingQueued(t *testing.T) {
	t.Parallel()
	r, c := setup(t)
	ctx := timeout(t, time.Minute)
	const key = "lock:close-fair-wait"
	a := newLocker(t, c, redislock.Fair())
	b := newLocker(t, newClient(t, r.Addr()), redislock.Fair())
	held, err := a.Acquire(ctx, key, instrument.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	waiting := make(chan struct{})
	go func() {
		cfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(time.Hour))
		var once sync.Once
		cfg.Observer = instrument.ObserverFuncs{OnWaiting: func(bool) { once.Do(func() { close(waiting) }) }}
		l, err := b.Acquire(ctx, key, instrument.WithConfig(cfg))
		if err == nil {
			_ = l.Release(ctx)
			err = errors.New("acquired")
		}
		got <- err
	}()
	<-waiting
	eventually(t, "the waiter's queue entry", func() bool { return c.LLen(ctx, "{"+key+"}:queue").Val() == 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, redislock.ErrClosed) {
		t.Fatalf("the waiter of a closed Locker: %v, want ErrClosed", err)
	}
	if n := c.LLen(ctx, "{"+key+"}:queue").Val(); n != 0 {
		t.Errorf("%d queue entries after the closed Locker's waiter returned, want 0", n)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, key).Val(); v != "" {
		t.Fatalf("after the holder's Release the key holds %q: handed to the closed Locker's waiter", v)
	}
	next, err := a.Acquire(ctx, key, instrument.FailFast())
	if err != nil {
		t.Fatalf("after the holder released: %v, want the lock", err)
	}
	_ = next.Release(ctx)
}

// TestClose_ConcurrentWithAcquireRefreshReleaseAndTheWatchdog: goroutines
// take, refresh and release locks through one Locker while Close is
// called, and a lease acquired before (its watchdog renewing it every
// 3 s) is held across it; run under the race detector. The workers' TTLs
// are 30 s (they release at once) and the lease held across Close renews
// every 3 s with 6 s to spare, so that a stall of a loaded machine does
// not lose a lease. Each goroutine stops at the first Acquire that fails,
// which must be ErrClosed; every Release and Refresh of a lease acquired
// before Close succeeds (Redis is up, the contexts live), and no lock is
// left on the server. A lease held across Close stays valid, as the doc
// says: its Context is not ended, the watchdog still renews it, Refresh
// and Release work (Release ends the Context with ErrReleased), and a
// second Release is ErrNotHeld.
func TestClose_ConcurrentWithAcquireRefreshReleaseAndTheWatchdog(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	ctx := timeout(t, time.Minute)
	l := newLocker(t, c)
	renewOpt, renewed := renewedSignal(9 * time.Second)
	across, err := l.Acquire(ctx, "lock:close-race:across", renewOpt)
	if err != nil {
		t.Fatal(err)
	}

	const workers = 8
	var rounds [workers]int
	var mu sync.Mutex
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			key := "lock:close-race:" + string(rune('a'+w))
			for {
				opt := instrument.FailFast()
				if w%2 == 1 {
					opt = instrument.WaitUntilDeadline()
				}
				lease, err := l.Acquire(ctx, key, instrument.WithTTL(30*time.Second), opt)
				if err != nil {
					if !errors.Is(err, redislock.ErrClosed) {
						errs <- err
						return
					}
					errs <- nil
					return
				}
				if err := lease.Refresh(ctx); err != nil {
					errs <- err
					return
				}
				if err := lease.Release(ctx); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				rounds[w]++
				mu.Unlock()
			}
		}()
	}
	eventually(t, "every worker to complete 3 rounds", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range rounds {
			if n < 3 {
				return false
			}
		}
		return true
	})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range workers {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("worker: %v (want every call to succeed until Acquire returns ErrClosed)", err)
			}
		case <-ctx.Done():
			t.Fatal("a worker still acquires a minute after Close")
		}
	}
	for w := range workers {
		if n := c.Exists(ctx, "lock:close-race:"+string(rune('a'+w))).Val(); n != 0 {
			t.Errorf("worker %d's lock is still on the server after its Release", w)
		}
	}

	// The lease held across Close.
	if err := across.Context().Err(); err != nil {
		t.Fatalf("the lease held across Close ended: %v (cause %v)", err, context.Cause(across.Context()))
	}
	for len(renewed) > 0 {
		<-renewed
	}
	select {
	case <-renewed:
	case <-ctx.Done():
		t.Fatal("the watchdog did not renew the lease held across Close")
	}
	if err := across.Refresh(ctx); err != nil {
		t.Fatalf("Refresh after Close: %v", err)
	}
	if err := across.Release(ctx); err != nil {
		t.Fatalf("Release after Close: %v", err)
	}
	if cause := context.Cause(across.Context()); !errors.Is(cause, instrument.ErrReleased) {
		t.Errorf("the Context's cause after Release: %v, want ErrReleased", cause)
	}
	if err := across.Release(ctx); !errors.Is(err, instrument.ErrNotHeld) {
		t.Errorf("a second Release after Close: %v, want ErrNotHeld", err)
	}
	if err := across.Refresh(ctx); err == nil {
		t.Error("Refresh after Release: nil, want an error")
	}
	if n := c.Exists(ctx, "lock:close-race:across").Val(); n != 0 {
		t.Error("the lease held across Close is still on the server after its Release")
	}
}
