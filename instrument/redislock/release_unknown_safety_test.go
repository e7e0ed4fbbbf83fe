package redislock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestRelease_GiveBackAfterALostReplyLeavesTheNextHolderAlone: the
// release ran, its reply was lost and the caller's context ended before
// go-redis could resend it (which would have found the tombstone), so the
// lock is given back in the background although it is no longer this
// token's. Either the release handed the lock to the queued waiter W
// ("handed"), or it deleted it and caller C took it before the give-back
// ran ("taken"). The give-back must touch neither W's nor C's lock, nor
// the entry of the waiter queued behind them (X, Y), nor hand a held lock
// on (Fair: leave.lua hands on a free lock only).
func TestRelease_GiveBackAfterALostReplyLeavesTheNextHolderAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fair  bool
		taken bool
	}{
		{"default/handed", false, false},
		{"fair/handed", true, false},
		{"default/taken", false, true},
		{"fair/taken", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, admin := setup(t)
			p := testenv.NewProxy(t, r.Addr())
			var opts []redislock.Option
			if tc.fair {
				opts = append(opts, redislock.Fair())
			}
			const key = "lock:give-back-after-a-lost-reply"
			// The give-back's leave.lua is held back until the next holder
			// holds the lock and another waiter is queued behind it.
			h := &leaveHook{queue: queueKey(key), proceed: make(chan struct{}), tries: make(chan leaveTry, 16), first: make(chan struct{})}
			hc := newClient(t, p.Addr())
			hc.AddHook(h)
			proceeded := false
			t.Cleanup(func() {
				if !proceeded {
					close(h.proceed)
				}
			})
			lh := newLocker(t, hc, opts...)
			ln := newLocker(t, newClient(t, r.Addr()), opts...) // W, or C
			lq := newLocker(t, newClient(t, r.Addr()), opts...) // X, or Y
			ctx := timeout(t, time.Minute)
			ttl := instrument.WithTTL(time.Hour)
			warmUp(t, ctx, lh, ttl) // the release is an EVALSHA on a pooled connection

			holder, err := lh.Acquire(ctx, key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			// The waiters end with the test (one that failed early) and
			// report nothing after it.
			wctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer stop()
			wait := func(l *redislock.Locker) <-chan instrument.Lease {
				got := make(chan instrument.Lease, 1)
				wg.Go(func() {
					lease, err := l.Acquire(wctx, key, ttl)
					if err != nil && wctx.Err() == nil {
						t.Errorf("waiter: %v", err)
					}
					got <- lease
				})
				return got
			}
			var next, queued <-chan instrument.Lease
			if !tc.taken {
				next = wait(ln)
				waitQueued(t, ctx, admin, key, 1)
				queued = wait(lq)
				waitQueued(t, ctx, admin, key, 2)
			}

			dropped := p.DropNextReply()
			rctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
			defer cancel()
			if err := holder.Release(rctx); err == nil {
				t.Fatal("Release = nil: go-redis resent it in time and found the tombstone; the test's premise failed")
			}
			select {
			case <-dropped:
			default:
				t.Fatal("no reply was dropped: the test's premise failed")
			}
			select {
			case <-h.first:
			case <-ctx.Done():
				t.Fatal("the release whose reply was lost was not given back")
			}

			var n instrument.Lease
			if tc.taken {
				if admin.Exists(ctx, key).Val() != 0 {
					t.Fatal("the lock stands: the release whose reply was dropped did not run")
				}
				if n, err = ln.Acquire(ctx, key, ttl, instrument.FailFast()); err != nil {
					t.Fatal(err)
				}
				queued = wait(lq)
				waitQueued(t, ctx, admin, key, 1)
			} else if n = <-next; n == nil {
				t.FailNow()
			}
			proceeded = true
			close(h.proceed)
			for done := false; !done; {
				select {
				case tr := <-h.tries:
					done = tr.err == nil
				case <-ctx.Done():
					t.Fatal("the give-back never succeeded")
				}
			}

			v := admin.Get(ctx, key).Val()
			if f := redislock.DecodeValue(v).Fence; f != n.Fence() || n.Context().Err() != nil {
				t.Fatalf("after the give-back the lock is %q (fence %d), want the next holder's (fence %d, lease live)", v, f, n.Fence())
			}
			if l := admin.LLen(ctx, queueKey(key)).Val(); l != 1 {
				t.Fatalf("after the give-back the queue holds %d entries, want the waiter queued behind the next holder", l)
			}
			if err := n.Release(ctx); err != nil {
				t.Fatalf("the next holder's Release: %v, want nil (its lock untouched)", err)
			}
			q := <-queued
			if q == nil {
				t.Fatal("the waiter queued behind the next holder never got the lock")
			}
			if err := q.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRelease_AFloodOnEndedContextsInAnOutageIsBounded: thousands of
// requests are cancelled while Redis cannot be reached, each deferring
// its lease's Release (on an ended context). Each Release returns at once;
// the give-backs wait in the background, MaxPendingLeaves of them at most
// (one goroutine each), the rest left to their TTL. Once Redis answers
// again every give-back that waited runs.
func TestRelease_AFloodOnEndedContextsInAnOutageIsBounded(t *testing.T) {
	// counts runtime.NumGoroutine: serial.
	r, admin := setup(t)
	p := testenv.NewProxy(t, r.Addr())
	c := newClient(t, p.Addr())
	l := newLocker(t, c)
	ctx := timeout(t, 3*time.Minute)
	const over = 200
	n := redislock.MaxPendingLeaves + over
	leases := make([]instrument.Lease, n)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				lease, err := l.Acquire(ctx, fmt.Sprintf("lock:flood:%d", i), instrument.WithTTL(time.Hour), instrument.FailFast(), instrument.WithoutWatchdog())
				if err != nil {
					t.Error(err)
					return
				}
				leases[i] = lease
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	base := runtime.NumGoroutine()
	p.Blackhole(true)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, lease := range leases {
		if err := lease.Release(ended); err == nil {
			t.Fatal("a Release on an ended context returned nil")
		}
	}
	pending, goroutines := redislock.PendingLeaves(l), runtime.NumGoroutine()
	t.Logf("%d Releases: %d give-backs pending, %d goroutines (%d before), %d connections", n, pending, goroutines, base, c.PoolStats().TotalConns)
	if pending > redislock.MaxPendingLeaves {
		t.Errorf("%d give-backs pending, want at most %d", pending, redislock.MaxPendingLeaves)
	}
	if extra := goroutines - base; extra > redislock.MaxPendingLeaves+100 {
		t.Errorf("%d goroutines more after the Releases, want about one per pending give-back (%d)", extra, pending)
	}

	p.Blackhole(false)
	// A minute: thousands of tries, MaxLeaving at a time, on a loaded CI.
	for deadline := time.Now().Add(time.Minute); redislock.PendingLeaves(l) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d give-backs still pending a minute after Redis answers again", redislock.PendingLeaves(l))
		}
	}
	left := 0
	for i := range n {
		left += int(admin.Exists(ctx, fmt.Sprintf("lock:flood:%d", i)).Val())
	}
	if left > over {
		t.Errorf("%d locks left after the outage, want at most the %d give-backs past the bound", left, over)
	}
}
