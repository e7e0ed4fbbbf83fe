package redislock_test

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestFair_StaleNotificationIsIgnoredAfterTheFenceCounterExpired: the
// package doc promises that "a notification older than the waiter's last
// attempt is ignored: every attempt reports the fence counter it saw". In
// Fair mode a failed attempt reports GET of the counter, and the counter
// lives TTL + retention after the last acquisition only (a failed fair
// attempt does not re-arm it, the holder's watchdog does not either). Once a
// holder has held for longer than that, every waiter's attempt reports 0,
// and any late handoff notification naming the waiter (here: one with a
// fence below the holder's) makes it a second holder, with a fence below the
// current holder's.
func TestFair_StaleNotificationIsIgnoredAfterTheFenceCounterExpired(t *testing.T) {
	t.Parallel()
	r, c := setup(t)
	ctx := timeout(t, 30*time.Second)
	const key = "lock:stale-counter"
	// A short retention makes the counter expire while X holds; with the
	// default (10 minutes) the same happens to a holder that holds longer.
	x := newLocker(t, c, redislock.Fair(), redislock.WithFenceRetention(time.Millisecond))
	// The watchdog renews it every 500 ms, ~1 s before it would expire on a
	// loaded machine with the package's other tests running beside this
	// one (600 ms left 400 ms).
	held, err := x.Acquire(ctx, key, instrument.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	w := newLocker(t, newClient(t, r.Addr()), redislock.Fair(), redislock.WithWaiterTimeout(300*time.Millisecond))
	var attempts atomic.Int32
	got := acquireInBackground(ctx, w, key, &attempts)
	waitQueued(t, ctx, c, key, 1)
	entry := strings.Fields(c.LIndex(ctx, queueKey(key), 0).Val())
	tok, lid := entry[0]+" ", entry[2]

	waitFor(t, ctx, "the fence counter to expire under the holder", func() bool {
		return c.Exists(ctx, "{"+key+"}:fence").Val() == 0
	})
	// An attempt after the expiry, with the subscription confirmed.
	for n := attempts.Load() + 2; attempts.Load() < n; {
		if ctx.Err() != nil {
			t.Fatal("the waiter stopped attempting")
		}
		time.Sleep(time.Millisecond)
	}
	if v := c.Get(ctx, key).Val(); redislock.DecodeValue(v).Fence != held.Fence() {
		t.Fatalf("the lock changed hands: %q", v)
	}
	before := attempts.Load()
	stale := redislock.WaiterID(tok) + " " + strconv.FormatUint(held.Fence()-1, 10)
	c.Publish(ctx, "{"+key+"}:released:"+lid, stale)
	for attempts.Load() < before+3 {
		select {
		case l := <-got:
			if l != nil {
				defer l.Release(ctx)
				t.Fatalf("a stale notification made the waiter a second holder: its fence %d, the holder's %d (lock value %q); X's lease live: %v",
					l.Fence(), held.Fence(), c.Get(ctx, key).Val(), held.Context().Err() == nil)
			}
			t.Fatal("the waiter gave up")
		case <-ctx.Done():
			t.Fatal("the waiter never attempted again")
		default:
			time.Sleep(time.Millisecond)
		}
	}
}
