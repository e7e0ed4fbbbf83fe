package redislock_test

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// resetSubscribeConn resets the connection under every SUBSCRIBE that names
// *channel while on is set.
type resetSubscribeConn struct {
	net.Conn
	on      *atomic.Bool
	channel string
}

func (c *resetSubscribeConn) Write(b []byte) (int, error) {
	if c.on.Load() && subscribes(b, c.channel) {
		return resetUnder(c.Conn)
	}
	return c.Conn.Write(b)
}

// TestFair_AWaiterWhoseSubscriptionKeepsFailingStillTakesTheLockItWasHanded:
// a Fair waiter queues in Redis on its first attempt, then waits for its
// subscription to be confirmed before it pauses. While its SUBSCRIBE keeps
// failing (the connection reset under every write) the release that hands
// it the lock is not heard; the notifier wakes the channel's waiters at
// every broken connection, so that they try again, but the waiter waiting
// for its confirmation did not listen: it took the lock only when its poll
// interval (here a minute) ran out.
func TestFair_AWaiterWhoseSubscriptionKeepsFailingStillTakesTheLockItWasHanded(t *testing.T) {
	t.Parallel()
	r, admin := setup(t)
	const key = "lock:fair-sub-fails"
	var failing atomic.Bool
	c := clientDialingThrough(t, r.Addr(), func(cn net.Conn) net.Conn {
		return &resetSubscribeConn{Conn: cn, on: &failing, channel: "{" + key + "}:released"}
	})
	ctx := timeout(t, time.Minute)
	holder, err := newLocker(t, admin, redislock.Fair()).Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	type result struct {
		l   instrument.Lease
		err error
	}
	got := make(chan result, 1)
	w := newLocker(t, c, redislock.Fair())
	go func() {
		l, err := w.Acquire(ctx, key, instrument.WithTTL(time.Minute), instrument.WithPollInterval(time.Minute))
		got <- result{l, err}
	}()
	waitQueued(t, ctx, admin, key, 1)
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-got:
		if res.err != nil {
			t.Fatalf("the waiter gave up: %v", res.err)
		}
		t.Logf("took the lock it was handed %v after the release", time.Since(released).Round(time.Millisecond))
		failing.Store(false)
		_ = res.l.Release(ctx)
	case <-time.After(10 * time.Second):
		failing.Store(false)
		t.Fatal("the waiter had not taken the lock it was handed 10s after the release (its poll interval is a minute)")
	}
}
