package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// Faults against the give-back of a Release whose outcome is unknown
// (request.Release, Locker.leave): it must never delete or hand over a
// lock another owner holds, and the lock it gives back must become free
// for others once the store can be reached. Each test holds the give-back
// back (a blackholed proxy, a dead server) until the fault has played out,
// then lets it through and waits for it to have run and ended: on store
// state and on the hook that counts its tries, never on a fixed sleep.

// giveBackWithin bounds each wait of these tests: liveness, not timing.
const giveBackWithin = 30 * time.Second

// pendingGiveBack is a lock held by A's Locker, which reaches Redis through
// a proxy only, so that the test can hold its give-back back.
type pendingGiveBack struct {
	p *testenv.Proxy
	h *inFlightLeaves // A's leave.lua tries (the give-back's), and those that ran
	l *redislock.Locker
}

// holdThroughAProxy acquires key (FailFast, with opts) through a Locker of
// its own that reaches r through a proxy, and returns the lease with
// what the test needs to hold its give-back back. The Locker tries its
// give-backs for a minute past the lock's TTL, so that a try the test
// lets through after a short TTL ran out is still made on a loaded machine.
func holdThroughAProxy(t *testing.T, ctx context.Context, r *testenv.Redis, key string, lopts []redislock.Option, opts ...instrument.AcquireOption) (instrument.Lease, *pendingGiveBack) {
	t.Helper()
	g := &pendingGiveBack{p: testenv.NewProxy(t, r.Addr()), h: &inFlightLeaves{}}
	c := newClient(t, g.p.Addr())
	c.AddHook(g.h)
	g.l = newLocker(t, c, lopts...)
	redislock.WidenLeaveWindow(g.l, time.Minute)
	lease, err := g.l.Acquire(ctx, key, append(opts, instrument.FailFast())...)
	if err != nil {
		t.Fatal(err)
	}
	return lease, g
}

// releaseUnknown cuts A off (blackholes its proxy) and releases lease on
// an ended context (`defer lease.Release(reqCtx)` after the request was
// cancelled): Release must fail, and its give-back must be tried in the
// background, into the blackhole for now.
func (g *pendingGiveBack) releaseUnknown(t *testing.T, lease instrument.Lease) {
	t.Helper()
	g.p.Blackhole(true)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lease.Release(ended); err == nil {
		t.Fatal("Release on an ended context = nil, want its error: whether the lock was free in time is unknown")
	}
	testenv.WaitFor(t, giveBackWithin, "the give-back's first try (into the blackhole): is the lock given back at all?", func() bool {
		_, tries, _ := g.h.counts()
		return tries >= 1
	})
	if _, _, ok := g.h.counts(); ok != 0 {
		t.Fatal("a give-back try ran although A is cut off: the blackhole did not hold it")
	}
}

// letThrough ends the blackhole and waits until the give-back has run
// (a leave.lua try got an answer) and ended.
func (g *pendingGiveBack) letThrough(t *testing.T) {
	t.Helper()
	g.p.Blackhole(false)
	testenv.WaitFor(t, giveBackWithin, "the give-back to run and end once A can reach Redis", func() bool {
		_, _, ok := g.h.counts()
		return ok >= 1 && redislock.PendingLeaves(g.l) == 0
	})
}

// keyValue returns key's value on c, waiting out the errors of a client
// whose pooled connections a restart broke; "" when the key is absent.
func keyValue(t *testing.T, ctx context.Context, c redis.UniversalClient, key string) string {
	t.Helper()
	var v string
	testenv.WaitFor(t, giveBackWithin, "a GET of "+key+" to be answered", func() bool {
		var err error
		v, err = c.Get(ctx, key).Result()
		if err == redis.Nil {
			v, err = "", nil
		}
		return err == nil
	})
	return v
}

// untouched fails the test unless key on c still has the value want, under
// a TTL, and lease, whose lock it is, is still live.
func untouched(t *testing.T, ctx context.Context, c redis.UniversalClient, key, want string, lease instrument.Lease, who string) {
	t.Helper()
	if got := keyValue(t, ctx, c, key); got != want {
		// Fences and TTLs name the locks: their tokens stay out of logs.
		g, w := redislock.DecodeValue(got), redislock.DecodeValue(want)
		t.Fatalf("after the give-back %q holds fence %d (TTL %v; absent: fence 0), want %s's lock (fence %d, TTL %v) untouched", key, g.Fence, g.TTL, who, w.Fence, w.TTL)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 {
		t.Fatalf("after the give-back %s's lock has PTTL %v, want its TTL", who, ttl)
	}
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("%s's lease ended (%v) although nobody but the give-back touched its lock", who, context.Cause(lease.Context()))
	}
}

// giveBackAfterATakeover: A's Release on an ended context leaves its give-back
// pending (A cut off); vanish makes A's lock disappear from Redis; B takes
// the lock and X queues behind B; only then does the give-back get through.
// leave.lua must find B's lock, not A's, and leave it and X's entry alone:
// B keeps the lock (its value and TTL, its lease live, its Release nil),
// and X gets it from B's release.
func giveBackAfterATakeover(t *testing.T, lopts []redislock.Option, attl time.Duration, vanish func(ctx context.Context, r *testenv.Redis, admin *redis.Client, key string)) {
	r, admin := setup(t)
	ctx := timeout(t, 2*time.Minute)
	const key = "lock:give-back-after-a-takeover"
	a, g := holdThroughAProxy(t, ctx, r, key, lopts, instrument.WithTTL(attl), instrument.WithoutWatchdog())
	g.releaseUnknown(t, a)

	vanish(ctx, r, admin, key)
	if v := keyValue(t, ctx, admin, key); v != "" {
		t.Fatalf("A's lock (fence %d) still stands: the fault did not make it vanish", redislock.DecodeValue(v).Fence)
	}
	hour := instrument.WithTTL(time.Hour)
	b, err := newLocker(t, newClient(t, r.Addr()), lopts...).Acquire(ctx, key, hour, instrument.FailFast())
	if err != nil {
		t.Fatalf("B cannot take the lock A's lock left: %v", err)
	}
	want := keyValue(t, ctx, admin, key)
	xctx, stop := context.WithCancel(ctx)
	defer stop()
	var attempts atomicInt
	xgot := acquireInBackground(xctx, newLocker(t, newClient(t, r.Addr()), lopts...), key, &attempts.v)
	waitQueued(t, ctx, admin, key, 1)

	g.letThrough(t)
	untouched(t, ctx, admin, key, want, b, "B")
	if n := admin.LLen(ctx, queueKey(key)).Val(); n != 1 {
		t.Fatalf("after the give-back the queue holds %d entries, want X's, queued behind B", n)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("B's Release: %v, want nil (its lock untouched)", err)
	}
	x := receive(t, xgot, "X, queued behind B, to be handed the lock by B's release")
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestGiveBack_PendingAcrossARestartLeavesTheNextHolderAlone (fault 1):
// redis-server restarts without persistence while A's give-back is
// pending; A's lock is gone with the data set, B takes the lock on the
// empty server and X queues behind B. The give-back, reaching the new
// server (its script cache empty too: NOSCRIPT, then EVAL), must leave
// B's lock and X's entry alone.
func TestGiveBack_PendingAcrossARestartLeavesTheNextHolderAlone(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			giveBackAfterATakeover(t, m.opts, time.Hour, func(ctx context.Context, r *testenv.Redis, _ *redis.Client, _ string) {
				if err := r.Restart(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestGiveBack_AfterTheTTLRanOutLeavesTheNextHolderAlone (fault 2): A's
// give-back is pending while A's lock runs out its TTL (half a second, no
// watchdog: the lease was released); B takes the lock and X queues behind
// B before the give-back gets through. The give-back, still tried (the
// lock's TTL plus the waiter timeout have not passed), must leave B's lock
// and X's entry alone.
func TestGiveBack_AfterTheTTLRanOutLeavesTheNextHolderAlone(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			giveBackAfterATakeover(t, m.opts, 500*time.Millisecond, func(ctx context.Context, _ *testenv.Redis, admin *redis.Client, key string) {
				testenv.WaitFor(t, giveBackWithin, "A's lock to run out its TTL", func() bool {
					n, err := admin.Exists(ctx, key).Result()
					return err == nil && n == 0
				})
			})
		})
	}
}

// TestGiveBack_FairWaiterQueuedWhenItRuns (fault 3): in Fair mode W, then
// X, queue behind A, and A's Release on an ended context leaves its
// give-back pending (A cut off). Then either
//
//   - "held": the give-back gets through while A's lock still stands: it
//     must hand the lock to W, the head of the queue (not leave it to its
//     hour's TTL), and only to W: X stays queued behind W;
//   - "expired": A's lock runs out its TTL first and W takes it by its own
//     attempt, X still queued; the give-back, getting through after that,
//     must leave W's lock alone, not hand it on to X.
//
// Either way W holds the lock once the give-back has ended, and X gets it
// from W's release.
func TestGiveBack_FairWaiterQueuedWhenItRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		expires bool
	}{{"held", false}, {"expired", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, admin := setup(t)
			ctx := timeout(t, 2*time.Minute)
			const key = "lock:give-back-fair-waiter"
			fair := []redislock.Option{redislock.Fair()}
			attl := time.Hour
			if tc.expires {
				attl = 2 * time.Second // the watchdog keeps it while W and X queue
			}
			a, g := holdThroughAProxy(t, ctx, r, key, fair, instrument.WithTTL(attl))
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			var wa, xa atomicInt
			wgot := acquireInBackground(wctx, newLocker(t, newClient(t, r.Addr()), fair...), key, &wa.v)
			waitQueued(t, ctx, admin, key, 1)
			xgot := acquireInBackground(wctx, newLocker(t, newClient(t, r.Addr()), fair...), key, &xa.v)
			waitQueued(t, ctx, admin, key, 2)
			g.releaseUnknown(t, a)

			var w instrument.Lease
			var want string // W's lock
			if tc.expires {
				// W's next attempt, at A's expiry, takes the lock.
				w = receive(t, wgot, "W to take the lock once A's ran out its TTL")
				want = keyValue(t, ctx, admin, key)
				waitQueued(t, ctx, admin, key, 1)
				if redislock.PendingLeaves(g.l) == 0 {
					t.Fatal("the give-back ended while A was cut off: the test's premise failed")
				}
			} else if v := keyValue(t, ctx, admin, key); redislock.DecodeValue(v).Fence != a.Fence() {
				t.Fatalf("the lock holds fence %d, want A's %d: the blackhole did not hold the give-back", redislock.DecodeValue(v).Fence, a.Fence())
			}
			g.letThrough(t)

			if w == nil {
				w = receive(t, wgot, "W, at the head of the queue, to be handed the lock by the give-back")
				want = keyValue(t, ctx, admin, key)
				if f := redislock.DecodeValue(want).Fence; f != w.Fence() {
					t.Fatalf("the give-back handed the lock to fence %d, want W's %d", f, w.Fence())
				}
			}
			untouched(t, ctx, admin, key, want, w, "W")
			if n := admin.LLen(ctx, queueKey(key)).Val(); n != 1 {
				t.Fatalf("after the give-back the queue holds %d entries, want X's, queued behind W", n)
			}
			if err := w.Release(ctx); err != nil {
				t.Fatalf("W's Release: %v, want nil (its lock untouched)", err)
			}
			x := receive(t, xgot, "X to be handed the lock by W's release")
			if err := x.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// receive waits (at most giveBackWithin) for a background Acquire's lease
// and fails the test if none comes or the Acquire failed.
func receive(t *testing.T, got <-chan instrument.Lease, what string) instrument.Lease {
	t.Helper()
	select {
	case lease := <-got:
		if lease == nil {
			t.Fatalf("waiting for %s: its Acquire failed", what)
		}
		return lease
	case <-time.After(giveBackWithin):
		t.Fatalf("not within %v: %s", giveBackWithin, what)
	}
	return nil
}
