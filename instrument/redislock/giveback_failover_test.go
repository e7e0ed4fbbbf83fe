package redislock_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestGiveBack_OnAPromotedReplica (fault 4): A holds key on a primary
// whose replica lags (the test cuts the replication link); the primary
// crashes, A's Release fails with its outcome unknown (the connection
// broke under it) and the give-back is tried in the background; the
// replica is promoted (REPLICAOF NO ONE, as Sentinel does), and A's
// client follows the failover (its dialer moves to the replica, as a
// virtual IP or a DNS name does) and gives the lock back there.
//
//   - "not-replicated": the replica never received A's lock. B takes the
//     lock on the promoted replica before A's client moves to it: the
//     give-back must leave B's lock alone.
//   - "replicated": the replica received A's lock (WAIT) and nothing after.
//     A's client reaches it while it is still a replica, whose READONLY
//     reply must not end the give-back; once it is promoted, the
//     give-back must free A's lock there, so that another caller takes
//     the lock instead of waiting out A's TTL (an hour).
func TestGiveBack_OnAPromotedReplica(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, replicated := range []bool{false, true} {
			name := m.name + "/not-replicated"
			if replicated {
				name = m.name + "/replicated"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				// No delay before the full sync the replica asks for (default 5s).
				primary := testenv.NewRedis(t, testenv.WithRedisArgs("--repl-diskless-sync-delay", "0"))
				link := testenv.NewProxy(t, primary.Addr())
				_, port, _ := strings.Cut(link.Addr(), ":")
				replica := testenv.NewRedis(t, testenv.WithRedisArgs("--replicaof", "127.0.0.1", port))
				cp, cr := newClient(t, primary.Addr()), newClient(t, replica.Addr())
				ctx := timeout(t, 2*time.Minute)
				testenv.WaitFor(t, giveBackWithin, "the replica to sync", func() bool {
					return infoField(t, ctx, cr, "replication", "master_link_status") == "up"
				})

				var target atomic.Pointer[string]
				follow := func(r *testenv.Redis) { addr := r.Addr(); target.Store(&addr) }
				follow(primary)
				hc := newClient(t, primary.Addr(), func(o *redis.Options) {
					o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
						var d net.Dialer
						return d.DialContext(ctx, network, *target.Load())
					}
				})
				h, ro := &inFlightLeaves{}, &readOnlyLeaves{}
				hc.AddHook(h)
				hc.AddHook(ro)
				l := newLocker(t, hc, m.opts...)
				const key = "lock:give-back-on-a-promoted-replica"
				hour := instrument.WithTTL(time.Hour)

				if !replicated {
					link.Blackhole(true) // nothing written from now on reaches the replica
				}
				a, err := l.Acquire(ctx, key, hour, instrument.FailFast())
				if err != nil {
					t.Fatal(err)
				}
				if replicated {
					if n, err := cp.Wait(ctx, 1, 10_000).Result(); err != nil || n != 1 {
						t.Fatalf("WAIT 1: %d replicas acknowledged, err %v", n, err)
					}
					link.Blackhole(true)
				}
				if has := keyValue(t, ctx, cr, key) != ""; has != replicated {
					t.Fatalf("the replica has A's lock: %v, want %v (the test's premise)", has, replicated)
				}

				if err := primary.Kill(); err != nil {
					t.Fatal(err)
				}
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if err := a.Release(rctx); err == nil {
					t.Fatal("a Release through a crashed primary returned nil")
				}
				testenv.WaitFor(t, giveBackWithin, "the give-back's first try (against the crashed primary): is the lock given back at all?", func() bool {
					_, tries, _ := h.counts()
					return tries >= 1
				})

				if !replicated {
					promote(t, ctx, cr)
					b, err := newLocker(t, newClient(t, replica.Addr()), m.opts...).Acquire(ctx, key, hour, instrument.FailFast())
					if err != nil {
						t.Fatalf("B cannot take the lock on the promoted replica, which never had A's: %v", err)
					}
					want := keyValue(t, ctx, cr, key)
					follow(replica)
					testenv.WaitFor(t, giveBackWithin, "the give-back to run on the promoted replica and end", func() bool {
						_, _, ok := h.counts()
						return ok >= 1 && redislock.PendingLeaves(l) == 0
					})
					untouched(t, ctx, cr, key, want, b, "B")
					if err := b.Release(ctx); err != nil {
						t.Fatalf("B's Release: %v, want nil (its lock untouched)", err)
					}
					return
				}

				follow(replica)
				testenv.WaitFor(t, giveBackWithin, "the give-back to try the replica again after its READONLY reply (ended there, it leaves A's lock on the replica for its TTL)", func() bool {
					return ro.n.Load() >= 2
				})
				promote(t, ctx, cr)
				testenv.WaitFor(t, giveBackWithin, "the give-back to free A's lock on the promoted replica", func() bool {
					n, err := cr.Exists(ctx, key).Result()
					return err == nil && n == 0 && redislock.PendingLeaves(l) == 0
				})
				taken, err := newLocker(t, newClient(t, replica.Addr()), m.opts...).Acquire(ctx, key, hour, instrument.FailFast())
				if err != nil {
					t.Fatalf("another caller cannot take the lock on the promoted replica after the give-back: %v", err)
				}
				if err := taken.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// promote makes the replica c reaches a primary, as Sentinel does in a
// failover.
func promote(t *testing.T, ctx context.Context, c *redis.Client) {
	t.Helper()
	if err := c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote the replica: %v", err)
	}
}

// readOnlyLeaves counts the leave.lua tries through a client that a
// replica answered READONLY (after go-redis's own resend).
type readOnlyLeaves struct {
	passThrough
	n atomic.Int32
}

func (h *readOnlyLeaves) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if runsLeave(cmd) && redis.HasErrorPrefix(err, "READONLY") {
			h.n.Add(1)
		}
		return err
	}
}
