package redislock_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
)

// failSubscribeConn fails (and closes) the first write of a SUBSCRIBE that
// names a channel containing *fail: the connection was reset under the
// writer, which finds out before the reader does.
type failSubscribeConn struct {
	net.Conn
	fail  *atomic.Pointer[string]
	fired chan struct{}
}

func (c *failSubscribeConn) Write(b []byte) (int, error) {
	if p := c.fail.Load(); p != nil && subscribes(b, *p) && c.fail.CompareAndSwap(p, nil) {
		close(c.fired)
		return resetUnder(c.Conn)
	}
	return c.Conn.Write(b)
}

// subscribes reports whether b, a write to Redis, is a SUBSCRIBE command
// naming a channel that contains channel. It matches the command's RESP
// bulk string, not the word anywhere: a script sent whole (EVAL) has
// "subscribe" in its comments and may carry the channel as an argument.
func subscribes(b []byte, channel string) bool {
	return bytes.Contains(b, []byte("$9\r\nsubscribe\r\n")) && bytes.Contains(b, []byte(channel))
}

// resetUnder closes cn and fails the write as a connection reset would.
func resetUnder(cn net.Conn) (int, error) {
	_ = cn.Close()
	return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
}

// clientDialingThrough is a client of addr (one resend, 1 s timeouts) whose
// connections are wrapped by wrap.
func clientDialingThrough(t *testing.T, addr string, wrap func(net.Conn) net.Conn) *redis.Client {
	t.Helper()
	var d net.Dialer
	c := redis.NewClient(&redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, MaxRetries: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			cn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return wrap(cn), nil
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestWait_ReleaseHeardAfterAFailedSubscribeWrite: the writer's
// SUBSCRIBE of a new channel fails (the connection was reset). notify.go's
// flush relies on go-redis "remembering the channels whatever the write's
// outcome and subscribing them on its next connection" — but go-redis
// redials inside the failed Subscribe (releaseConn -> reconnect), before it
// adds the channels to its set, so the new connection is not subscribed to
// the channel. The notifier then writes its barrier on that connection and
// confirms the channel: the waiter is queued with a confirmed subscription,
// and the release that hands it the lock is never heard: it waits for its
// next attempt (a third of the 5s waiter timeout), on every handoff, for as
// long as the key stays contended (plus the idle timeout), since later
// waiters join the "confirmed" channel without a round trip. Before
// 488ae86, subscribe failed the Acquire on a failed SUBSCRIBE write and
// kept no channel state.
func TestWait_ReleaseHeardAfterAFailedSubscribeWrite(t *testing.T) {
	t.Parallel()
	r, admin := setup(t)
	const key = "lock:lost-sub"
	var fail atomic.Pointer[string]
	fired := make(chan struct{})
	c := clientDialingThrough(t, r.Addr(), func(cn net.Conn) net.Conn {
		return &failSubscribeConn{Conn: cn, fail: &fail, fired: fired}
	})
	l := newLocker(t, c)
	other := newLocker(t, admin)
	ctx := timeout(t, time.Minute)

	ch := "{" + key + "}:released"
	fail.Store(&ch)
	var report []string
	for round := range 4 {
		holder, err := other.Acquire(ctx, key, instrument.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		waiting, done := startWaiter(t, l, key) // polls once a minute
		awaitWaiting(t, waiting, done)
		if round == 0 {
			select {
			case <-fired:
			case <-time.After(10 * time.Second):
				t.Fatal("the SUBSCRIBE was never written")
			}
		}
		// Queued in Redis: with a one-minute poll, waitReady returned only
		// on the confirmation (or the waiter joined a confirmed channel).
		eventually(t, "the waiter queued", func() bool { return admin.LLen(ctx, queueKey(key)).Val() == 1 })
		subs := keySubscribers(t, admin, key)
		start := time.Now()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: waiter: %v", round, err)
		}
		took := time.Since(start)
		t.Logf("round %d: subscribers of the key's channel at release %d, handoff heard after %v", round, subs, took)
		// A heard handoff takes milliseconds; a missed one waits for the
		// waiter's next attempt (a third of the 5s waiter timeout).
		if round > 0 && (took > time.Second || subs != 1) {
			report = append(report, fmt.Sprintf("round %d: %d subscribers, lock taken %v after the release", round, subs, took))
		}
	}
	if len(report) > 0 {
		t.Errorf("after one failed SUBSCRIBE write the notifier counts the channel confirmed while Redis has it unsubscribed: "+
			"every later waiter joins it and misses the release that hands it the lock:\n%s", strings.Join(report, "\n"))
	}
}
