package redislock_test

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	if c.on.Load() && bytes.Contains(b, []byte("subscribe")) && !bytes.Contains(b, []byte("unsubscribe")) && bytes.Contains(b, []byte(c.channel)) {
		_ = c.Conn.Close()
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
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
	r, admin := setup(t)
	const key = "lock:fair-sub-fails"
	var failing atomic.Bool
	var d net.Dialer
	c := redis.NewClient(&redis.Options{
		Addr: r.Addr(), ContextTimeoutEnabled: true, MaxRetries: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			cn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &resetSubscribeConn{Conn: cn, on: &failing, channel: "{" + key + "}:released"}, nil
		},
	})
	t.Cleanup(func() { _ = c.Close() })
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
