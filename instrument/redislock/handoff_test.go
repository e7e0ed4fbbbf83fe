package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// modes are the two single-node modes; both hand a released lock over.
var modes = []struct {
	name string
	opts []redislock.Option
}{{"default", nil}, {"fair", []redislock.Option{redislock.Fair()}}}

// queueKey and waitersKey are the companion keys of an untagged key.
func queueKey(key string) string   { return "{" + key + "}:queue" }
func waitersKey(key string) string { return "{" + key + "}:waiters" }

// waitQueued polls until key's waiter queue holds n entries.
func waitQueued(t *testing.T, ctx context.Context, c *redis.Client, key string, n int64) {
	t.Helper()
	for c.LLen(ctx, queueKey(key)).Val() != n {
		if ctx.Err() != nil {
			t.Fatalf("queue of %q never reached %d entries", key, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// acquireInBackground starts an Acquire on l in the background; attempts counts its
// attempts.
func acquireInBackground(ctx context.Context, l *redislock.Locker, key string, attempts *atomic.Int32) <-chan instrument.Lease {
	got := make(chan instrument.Lease, 1)
	go func() {
		cfg, _ := instrument.ApplyAcquireOptions()
		cfg.Observer = instrument.ObserverFuncs{OnAttempt: func(bool) { attempts.Add(1) }}
		lease, err := l.Acquire(ctx, key, instrument.WithConfig(cfg))
		if err != nil {
			lease = nil
		}
		got <- lease
	}()
	return got
}

// checkTTLs fails when any key in Redis lives without a TTL (the agent
// flags those).
func checkTTLs(t *testing.T, ctx context.Context, c *redis.Client) {
	t.Helper()
	for _, k := range c.Keys(ctx, "*").Val() {
		if c.PTTL(ctx, k).Val() == -1 {
			t.Errorf("key %q has no TTL", k)
		}
	}
}

// TestHandoff_ReleaseHandsTheLockToTheQueuedWaiter: by the time Release
// returns, the lock is the waiter's (a decodable value with a larger
// fence), so the releaser asking again at once cannot barge back in; the
// waiter's lease carries that fence; nothing is left without a TTL.
func TestHandoff_ReleaseHandsTheLockToTheQueuedWaiter(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r, c := setup(t)
			ctx := timeout(t, 20*time.Second)
			const key = "lock:handoff"
			a := newLocker(t, c, m.opts...)
			b := newLocker(t, newClient(t, r.Addr()), m.opts...)
			held, err := a.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			var attempts atomic.Int32
			got := acquireInBackground(ctx, b, key, &attempts)
			waitQueued(t, ctx, c, key, 1)
			checkTTLs(t, ctx, c)
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			v, err := c.Get(ctx, key).Result()
			if err != nil {
				t.Fatalf("lock not handed over: %v", err)
			}
			h := redislock.DecodeValue(v)
			if h.Fence <= held.Fence() {
				t.Fatalf("handed-over fence %d not above the releaser's %d (value %q)", h.Fence, held.Fence(), v)
			}
			if h.Service == "" {
				t.Fatalf("handed-over value %q does not decode", v)
			}
			if _, err := a.Acquire(ctx, key, instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
				t.Fatalf("the releaser barged back in: %v", err)
			}
			lease := <-got
			if lease == nil {
				t.Fatal("waiter did not get the lock")
			}
			if lease.Fence() != h.Fence {
				t.Fatalf("waiter's lease fence %d, lock value's %d", lease.Fence(), h.Fence)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n := c.Exists(ctx, key, queueKey(key), waitersKey(key)).Val(); n != 0 {
				t.Fatalf("%d of lock, queue, deadlines left after the last release", n)
			}
			checkTTLs(t, ctx, c)
		})
	}
}

// TestHandoff_WaiterThatGaveUpHandsTheLockOn: a release hands the lock to
// a waiter that gave up before it heard; its leave hands the lock on to the
// next waiter instead of leaving it unused for its TTL.
func TestHandoff_WaiterThatGaveUpHandsTheLockOn(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r, c := setup(t)
			ctx := timeout(t, 20*time.Second)
			const key = "lock:gaveup"
			a := newLocker(t, c, m.opts...)
			held, err := a.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			// A waiter ahead of b, queued the way acquire.lua queues.
			const tok = "gaveup "
			entry := tok + "5000 0123456789abcdef " + `{"service":"test"`
			c.RPush(ctx, queueKey(key), entry)
			c.ZAdd(ctx, waitersKey(key), redisZ(float64(time.Now().Add(time.Minute).UnixMilli()), entry))
			c.PExpire(ctx, queueKey(key), time.Minute)
			c.PExpire(ctx, waitersKey(key), time.Minute)

			b := newLocker(t, newClient(t, r.Addr()), m.opts...)
			var attempts atomic.Int32
			got := acquireInBackground(ctx, b, key, &attempts)
			waitQueued(t, ctx, c, key, 2)
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if v := c.Get(ctx, key).Val(); !strings.HasPrefix(v, tok) {
				t.Fatalf("lock not handed to the head waiter: %q", v)
			}
			if err := redislock.Leave(ctx, c, key, tok, entry, m.name == "fair"); err != nil {
				t.Fatal(err)
			}
			lease := <-got
			if lease == nil {
				t.Fatal("the waiter behind never got the lock")
			}
			if lease.Fence() <= held.Fence() {
				t.Fatalf("fence %d not above %d", lease.Fence(), held.Fence())
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHandoff_GoneWaiterIsSkipped: an entry whose deadline passed (its
// waiter stopped retrying: it died) is not handed the lock.
func TestHandoff_GoneWaiterIsSkipped(t *testing.T) {
	t.Parallel()
	r, c := setup(t)
	ctx := timeout(t, 20*time.Second)
	const key = "lock:gone2"
	a := newLocker(t, c)
	held, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	entry := "dead 5000 0123456789abcdef " + `{"service":"test"`
	c.RPush(ctx, queueKey(key), entry)
	c.ZAdd(ctx, waitersKey(key), redisZ(float64(time.Now().Add(-time.Second).UnixMilli()), entry))
	b := newLocker(t, newClient(t, r.Addr()))
	var attempts atomic.Int32
	got := acquireInBackground(ctx, b, key, &attempts)
	waitQueued(t, ctx, c, key, 2)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-got
	if lease == nil {
		t.Fatal("the waiter behind a dead one never got the lock")
	}
	_ = lease.Release(ctx)
}

// TestHandoff_StaleNotificationIsIgnored: a handoff notification older
// than the waiter's last attempt (here: one naming it with a fence below
// what that attempt saw) does not make it believe it holds the lock; it
// tries again, and gets the lock only from the real handoff.
func TestHandoff_StaleNotificationIsIgnored(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r, c := setup(t)
			ctx := timeout(t, 20*time.Second)
			const key = "lock:stale"
			a := newLocker(t, c, m.opts...)
			held, err := a.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			b := newLocker(t, newClient(t, r.Addr()), m.opts...)
			var attempts atomic.Int32
			got := acquireInBackground(ctx, b, key, &attempts)
			waitQueued(t, ctx, c, key, 1)
			entry := strings.Fields(c.LIndex(ctx, queueKey(key), 0).Val())
			tok, lid := entry[0]+" ", entry[2] // "<token> <ttl> <locker id> <metadata>"
			// Both modes attempt again once the subscription is confirmed:
			// from then on a notification reaches the waiter.
			for attempts.Load() < 2 {
				if ctx.Err() != nil {
					t.Fatal("the waiter never attempted twice")
				}
				time.Sleep(time.Millisecond)
			}
			before := attempts.Load()
			stale := redislock.WaiterID(tok) + " " + strconv.FormatUint(held.Fence()-1, 10)
			c.Publish(ctx, "{"+key+"}:released:"+lid, stale)
			for attempts.Load() == before {
				select {
				case l := <-got:
					t.Fatalf("a stale notification made the waiter a holder (lease %v)", l)
				case <-ctx.Done():
					t.Fatal("the waiter never woke for the notification")
				default:
					time.Sleep(time.Millisecond)
				}
			}
			if v := c.Get(ctx, key).Val(); redislock.DecodeValue(v).Fence != held.Fence() {
				t.Fatalf("the lock changed hands: %q", v)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lease := <-got
			if lease == nil || lease.Fence() <= held.Fence() {
				t.Fatalf("waiter's lease %v after the real handoff", lease)
			}
			_ = lease.Release(ctx)
		})
	}
}
