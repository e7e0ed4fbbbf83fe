package redislock_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// psClient dials addr directly, except while viaProxy is set, when it dials
// p: the test routes the pub/sub connection alone through the proxy.
func psClient(t *testing.T, addr string, p *testenv.Proxy, viaProxy *atomic.Bool) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, MaxRetries: 1, PoolSize: 4,
		Dialer: func(ctx context.Context, network, a string) (net.Conn, error) {
			if viaProxy.Load() {
				a = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, a)
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestHandoff_LostNotification: the waiter's pub/sub connection goes
// half-open and the handoff's PUBLISH never reaches it. With time left, the
// waiter still gets the lock it was handed at its next poll; with little
// time left, it gives up and its leave passes the lock on.
func TestHandoff_LostNotification(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, short := range []bool{false, true} {
			name := m.name + map[bool]string{false: "/gets-it", true: "/gives-up"}[short]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r, admin := setup(t)
				p := testenv.NewProxy(t, r.Addr())
				var viaProxy atomic.Bool
				c := psClient(t, r.Addr(), p, &viaProxy)
				if err := c.Ping(timeout(t, 5*time.Second)).Err(); err != nil {
					t.Fatal(err)
				}
				ctx := timeout(t, 30*time.Second)
				const key = "lock:lost-publish"
				a := newLocker(t, admin, m.opts...)
				w := newLocker(t, c, m.opts...)
				held, err := a.Acquire(ctx, key, instrument.WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				viaProxy.Store(true)
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				type res struct {
					l   instrument.Lease
					err error
				}
				got := make(chan res, 1)
				go func() {
					l, err := w.Acquire(wctx, key, instrument.WithTTL(time.Minute))
					got <- res{l, err}
				}()
				eventually(t, "the waiter subscribed", func() bool { return keySubscribers(t, admin, key) == 1 })
				viaProxy.Store(false)
				waitQueued(t, ctx, admin, key, 1)
				p.HalfOpen()
				start := time.Now()
				if short {
					// Less time than the waiter's poll interval (1s).
					go func() { time.Sleep(300 * time.Millisecond); cancel() }()
				}
				if err := held.Release(ctx); err != nil {
					t.Fatal(err)
				}
				rs := <-got
				took := time.Since(start)
				if rs.err != nil {
					if !short {
						t.Fatalf("the waiter did not get the lock it was handed: %v after %v", rs.err, took)
					}
					// Its leave runs in the background, bounded by a second;
					// room for a loaded machine, against the lock's minute.
					lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
					for admin.Exists(lctx, key).Val() != 0 && lctx.Err() == nil {
						time.Sleep(5 * time.Millisecond)
					}
					lcancel()
					if v, err := admin.Get(ctx, key).Result(); err == nil {
						t.Fatalf("the waiter gave up and the lock it was handed stays held: %q (PTTL %v)", v, admin.PTTL(ctx, key).Val())
					}
					return
				}
				// Its context (20s) ends long before the lock's minute: a
				// lock it got at all, it got at a poll, not by expiry.
				t.Logf("got the lock %v after the release", took)
				_ = rs.l.Release(ctx)
			})
		}
	}
}
