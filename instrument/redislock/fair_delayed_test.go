package redislock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestFair_DelayedHandoffNotificationAfterTheCounterExpired is
// TestFair_StaleNotificationIsIgnoredAfterTheFenceCounterExpired with a
// real handoff instead of a published copy: W's pub/sub connection alone
// runs through a proxy that delays it by 3.2s. H hands the lock to W; the
// notification is on its way; W's lock expires before W's next attempt; X
// takes the free lock (nobody queues) and holds it past TTL + retention, so
// the counter expires; W's next attempt reports 0 as the counter it saw; the
// late notification then makes W a holder beside X, with a lower fence.
func TestFair_DelayedHandoffNotificationAfterTheCounterExpired(t *testing.T) {
	// Serial: X's 300 ms lease, which its watchdog must keep, expired under
	// load with parallel tests beside it, and W then took the lock lawfully.
	r, admin := setup(t)
	p := testenv.NewProxy(t, r.Addr())
	var viaProxy atomic.Bool
	c := psClient(t, r.Addr(), p, &viaProxy)
	ctx := timeout(t, 60*time.Second)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const key = "lock:delayed-handoff"
	h := newLocker(t, admin, redislock.Fair())
	x := newLocker(t, newClient(t, r.Addr()), redislock.Fair(), redislock.WithFenceRetention(time.Millisecond))
	w := newLocker(t, c, redislock.Fair(), redislock.WithWaiterTimeout(9*time.Second)) // retries every 3s
	held, err := h.Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const delay = 3200 * time.Millisecond
	viaProxy.Store(true)
	var attempts atomic.Int32
	cfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(1500*time.Millisecond), instrument.WithPollInterval(10*time.Second))
	cfg.Observer = instrument.ObserverFuncs{OnAttempt: func(bool) { attempts.Add(1) }}
	got := make(chan instrument.Lease, 1)
	go func() {
		l, err := w.Acquire(ctx, key, instrument.WithConfig(cfg))
		if err != nil {
			t.Logf("W: %v", err)
		}
		got <- l
	}()
	eventually(t, "W subscribed", func() bool { return keySubscribers(t, admin, key) == 1 })
	// W's subscription confirmed (its barrier came back through the proxy)
	// and W back to its 3s retry cycle; from now on the proxy delays.
	waitFor(t, ctx, "W's second attempt", func() bool { return attempts.Load() >= 2 })
	viaProxy.Store(false)
	p.SetLatency(delay)
	n := attempts.Load()
	waitFor(t, ctx, "W's next attempt", func() bool { return attempts.Load() > n })
	if err := held.Release(ctx); err != nil { // hands the lock to W; the notification is delayed
		t.Fatal(err)
	}
	handed := redislock.DecodeValue(admin.Get(ctx, key).Val()).Fence
	waitFor(t, ctx, "W's handed lock to expire unused", func() bool { return admin.Exists(ctx, key).Val() == 0 })
	xl, err := x.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	defer xl.Release(ctx)
	waitFor(t, ctx, "the counter to expire under X", func() bool { return admin.Exists(ctx, "{"+key+"}:fence").Val() == 0 })
	select {
	case l := <-got:
		if l != nil {
			defer l.Release(ctx)
			t.Fatalf("W holds with fence %d (handed %d) while X holds with fence %d (X's lease live: %v): two holders, fences out of order",
				l.Fence(), handed, xl.Fence(), xl.Context().Err() == nil)
		}
	case <-time.After(2 * delay):
		t.Logf("W did not take the late notification (handed %d, X %d)", handed, xl.Fence())
	}
}
