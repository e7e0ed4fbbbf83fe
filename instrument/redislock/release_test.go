package redislock_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// gatedClient dials addr like newClient, except that every connection after
// the first waits until gate is closed: a command retried on a new
// connection runs only when the test lets it.
func gatedClient(t *testing.T, addr string, gate <-chan struct{}) *redis.Client {
	t.Helper()
	var dials atomic.Int32
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           30 * time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		MaxRetries:            1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) > 1 {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestDo_RetriedReleaseIsNotALoss: the release script runs and deletes the
// lock, its reply is lost, and go-redis retries it on a new connection. The
// retry finds the key gone (or, under contention, already the next
// holder's), which is not a loss: fn finished under the lock and Do must say
// so, not ErrLockLost (callers would redo the work).
func TestDo_RetriedReleaseIsNotALoss(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fair  bool
		taken bool // the next holder takes the lock before the retry runs
	}{
		{"free", false, false},
		{"taken", false, true},
		{"fair/free", true, false},
		{"fair/taken", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, admin := setup(t)
			p := testenv.NewProxy(t, r.Addr())
			gate := make(chan struct{})
			var opts []redislock.Option
			if tc.fair {
				opts = append(opts, redislock.Fair())
			}
			la := newLocker(t, gatedClient(t, p.Addr(), gate), opts...)
			lb := newLocker(t, admin, opts...)
			ctx := timeout(t, time.Minute)
			const key = "lock:retried-release"
			// Load the scripts: the dropped reply must be the release's,
			// not a NOSCRIPT that go-redis answers with EVAL.
			warmUp(t, ctx, la, instrument.FailFast())

			var dropped <-chan struct{}
			next := make(chan struct{})
			err := instrument.Do(ctx, la, key, func(context.Context) error {
				dropped = p.DropNextReply()
				go func() {
					defer close(next)
					// The first try ran (its reply was dropped): the lock
					// is free; the retry waits for the gate.
					select {
					case <-dropped:
					case <-ctx.Done():
						return
					}
					if tc.taken {
						b, err := lb.Acquire(ctx, key)
						if err != nil {
							t.Errorf("B: %v", err)
						} else {
							defer b.Release(ctx)
						}
					}
					close(gate)
				}()
				return nil
			})
			<-next
			select {
			case <-dropped:
			default:
				t.Fatal("no reply was dropped: the scenario did not happen")
			}
			if err != nil {
				t.Fatalf("Do after a release whose reply was lost and retried: %v, want nil", err)
			}
		})
	}
}

// TestRelease_ExpiredLockIsNotHeld: a lock that vanished by expiry leaves
// no tombstone, so Release still reports the loss.
func TestRelease_ExpiredLockIsNotHeld(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 30*time.Second)
	lease, err := l.Acquire(ctx, "lock:expired", instrument.WithTTL(100*time.Millisecond), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the lock to expire", func() bool { return c.Exists(ctx, "lock:expired").Val() == 0 })
	if err := lease.Release(ctx); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("Release after expiry: %v, want ErrNotHeld", err)
	}
}

// TestRelease_TombstoneLivesAsLongAsARetry: the tombstone a release leaves
// lives until the call's context ends plus a second, and never more than a
// minute (maxTombstoneTTL): a tombstone under an hour-long context held
// memory for an hour, one key per release. The bounds are read from the
// test's own clock around the release, so a slow machine cannot fail it.
func TestRelease_TombstoneLivesAsLongAsARetry(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 30*time.Second)
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
	}{{"5s", 5 * time.Second}, {"1h", time.Hour}, {"none", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "lock:tomb-ttl:" + tc.name
			lease, err := l.Acquire(ctx, key, instrument.FailFast())
			if err != nil {
				t.Fatal(err)
			}
			rctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				rctx, cancel = context.WithTimeout(rctx, tc.deadline)
				defer cancel()
			}
			// The TTL the release can set at most: the context's time left
			// now, plus a second, capped at a minute.
			start, want := time.Now(), time.Minute
			if dl, ok := rctx.Deadline(); ok {
				want = min(time.Until(dl)+time.Second, want)
			}
			if err := lease.Release(rctx); err != nil {
				t.Fatal(err)
			}
			tombs, err := c.Keys(ctx, "{"+key+"}:rel:*").Result()
			if err != nil || len(tombs) != 1 {
				t.Fatalf("tombstones of %s: %q, %v; want one", key, tombs, err)
			}
			ttl, err := c.PTTL(ctx, tombs[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			// It counts down from at most want, and from no less than want
			// minus the time since start (and the milliseconds Redis rounds).
			if low := want - time.Since(start) - 10*time.Millisecond; ttl < low || ttl > want {
				t.Fatalf("tombstone TTL under a %s context: %v, want %v-%v", tc.name, ttl, low, want)
			}
		})
	}
}

// TestDo_RetriedReleaseAfterHandoff: the release script hands the lock to a
// queued waiter, its reply is lost, and go-redis retries it. The retry finds
// the waiter's lock: it must neither touch it (hand it on again, delete it)
// nor report a loss.
func TestDo_RetriedReleaseAfterHandoff(t *testing.T) {
	t.Parallel()
	retriedReleaseAfterHandoff(t, false)
}

// TestDo_RetriedReleaseAfterHandoffLeavesTheNextWaiterQueued: as
// TestDo_RetriedReleaseAfterHandoff, with a second waiter C queued behind
// B. release.lua pops the head entry itself (and passes it to hand_over):
// the retry, which finds B's lock, must pop nothing, so C stays queued and
// B stays the one holder.
func TestDo_RetriedReleaseAfterHandoffLeavesTheNextWaiterQueued(t *testing.T) {
	t.Parallel()
	retriedReleaseAfterHandoff(t, true)
}

// retriedReleaseAfterHandoff is the scenario of the two tests above, in
// default and Fair mode, with C queued behind B or not (withC).
func retriedReleaseAfterHandoff(t *testing.T, withC bool) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "fair"}[fair], func(t *testing.T) {
			t.Parallel()
			r, admin := setup(t)
			p := testenv.NewProxy(t, r.Addr())
			gate := make(chan struct{})
			var opts []redislock.Option
			if fair {
				opts = append(opts, redislock.Fair())
			}
			la := newLocker(t, gatedClient(t, p.Addr(), gate), opts...)
			// B and C on Lockers of their own (a Locker queues one
			// waiter per key in Redis, the rest locally).
			lb := newLocker(t, admin, opts...)
			lc := newLocker(t, admin, opts...)
			ctx := timeout(t, time.Minute)
			const key = "lock:retried-handoff-two"
			warmUp(t, ctx, la, instrument.FailFast())

			var dropped <-chan struct{}
			got, held := make(chan instrument.Lease, 2), make(chan instrument.Lease, 1)
			// The waiters end with the test (a C still waiting when it
			// fails), and report nothing after it.
			wctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer stop()
			acquire := func(l *redislock.Locker) {
				defer wg.Done()
				l2, err := l.Acquire(wctx, key, instrument.WithPollInterval(time.Minute))
				if err != nil && wctx.Err() == nil {
					t.Errorf("waiter: %v", err)
				}
				got <- l2
			}
			err := instrument.Do(ctx, la, key, func(context.Context) error {
				wg.Add(1)
				go acquire(lb)
				waitQueued(t, ctx, admin, key, 1)
				if withC {
					wg.Add(1)
					go acquire(lc)
					waitQueued(t, ctx, admin, key, 2)
				}
				dropped = p.DropNextReply()
				go func() {
					// The first try ran and handed the lock to B; the retry
					// runs once B holds it, C still queued.
					select {
					case <-dropped:
					case <-ctx.Done():
						return
					}
					select {
					case b := <-got:
						held <- b
					case <-ctx.Done():
					}
					close(gate)
				}()
				return nil
			})
			select {
			case <-dropped:
			default:
				t.Fatal("no reply was dropped: the scenario did not happen")
			}
			if err != nil {
				t.Fatalf("Do after a handed-over release whose reply was lost and retried: %v, want nil", err)
			}
			var b instrument.Lease
			select {
			case b = <-held:
			case <-ctx.Done():
				t.Fatal("B never got the lock")
			}
			if b == nil {
				t.FailNow()
			}
			v := admin.Get(ctx, key).Val()
			if f := redislock.DecodeValue(v).Fence; f != b.Fence() || b.Context().Err() != nil {
				t.Fatalf("after the retried release the lock is %q (fence %d), want B's (fence %d, lease live)", v, f, b.Fence())
			}
			if !withC {
				if n := admin.LLen(ctx, queueKey(key)).Val(); n != 0 {
					t.Fatalf("queue holds %d entries after the handoff", n)
				}
				if err := b.Release(ctx); err != nil {
					t.Errorf("B's Release after the retried release: %v, want nil (B's lock untouched)", err)
				}
				return
			}
			if n := admin.LLen(ctx, queueKey(key)).Val(); n != 1 {
				t.Fatalf("queue holds %d entries after the retried release, want 1 (C)", n)
			}
			select {
			case c := <-got:
				t.Fatalf("C got the lock (%v) while B holds it", c)
			case <-time.After(100 * time.Millisecond):
			}
			if err := b.Release(ctx); err != nil {
				t.Fatalf("B's Release after the retried release: %v, want nil (B's lock untouched)", err)
			}
			select {
			case c := <-got:
				if c == nil {
					t.FailNow()
				}
				if err := c.Release(ctx); err != nil {
					t.Errorf("C's Release: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("C never got the lock after B released")
			}
		})
	}
}
