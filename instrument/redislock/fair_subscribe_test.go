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
// interval ran out. Here the poll interval is an hour and the waiter's
// context a minute: a lock taken at all was taken on a wake-up.
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
		l, err := w.Acquire(ctx, key, instrument.WithTTL(time.Minute), instrument.WithPollInterval(time.Hour))
		got <- result{l, err}
	}()
	waitQueued(t, ctx, admin, key, 1)
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-got // by ctx's end at the latest
	failing.Store(false)
	if res.err != nil {
		t.Fatalf("the waiter did not take the lock it was handed: %v, %v after the release (its poll interval is an hour: only a wake-up could give it the lock before its context ended)", res.err, time.Since(released).Round(time.Millisecond))
	}
	t.Logf("took the lock it was handed %v after the release", time.Since(released).Round(time.Millisecond))
	_ = res.l.Release(ctx)
}
