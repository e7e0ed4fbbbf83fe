package quota_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_AWaitWhoseReplyIsLostIsNotReplicatedNeverTheFallback:
// with WithReplicaAcks and WithFallback, the replica stopped, a Deduct's
// script runs on the primary and answers, and the connection is killed
// (CLIENT KILL) while its WAIT blocks: the script's reply reached the
// client, the WAIT's never does. With retries off (MaxRetries -1), or with
// testenv's one retry killed alike, go-redis stamps the WAIT's transport
// error on every command it had answered, the script's included. The
// deduction is in Redis: Deduct must say ErrNotReplicated, not hand the
// request to the fallback (a second deduction, in the fallback's ledger)
// and not count it degraded; the retry after the replica is back replays
// it (7 left: one deduction).
func TestReplicaAcks_AWaitWhoseReplyIsLostIsNotReplicatedNeverTheFallback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kills int
		opts  func(o *redis.Options)
	}{
		{"no retries", 1, func(o *redis.Options) { o.MaxRetries = -1 }},
		{"the retry killed too", 2, func(*redis.Options) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := timeout(t, 2*time.Minute)
			rp := replicatedStock(t, ctx)
			o := *testenv.NewRedisClient(t, rp.Primary.Addr()).Options()
			tc.opts(&o)
			c := redis.NewClient(&o)
			t.Cleanup(func() { _ = c.Close() })
			reg := prometheus.NewPedanticRegistry()
			var fallbacks atomic.Int32
			q := newQuota(t, c, quota.WithReplicaAcks(1, healthyAckTimeout), quota.WithRegisterer(reg),
				quota.WithFallback(func(context.Context, string, int64, string) (int64, error) {
					fallbacks.Add(1)
					return 0, nil
				}))
			// Load the scripts, so that the pipeline killed is the EVALSHA's.
			if _, err := q.Deduct(ctx, failoverKey, 1, "warm"); err != nil {
				t.Fatal(err)
			}
			resume := rp.PauseReplica(t)
			errc := make(chan error, 1)
			go func() {
				_, err := q.Deduct(ctx, failoverKey, 2, "order-1")
				errc <- err
			}()
			for range tc.kills {
				rp.Primary.KillBlockedIn(t, "wait")
			}
			err := <-errc
			if !errors.Is(err, quota.ErrNotReplicated) {
				t.Errorf("Deduct whose WAIT reply was lost = %v; want ErrNotReplicated", err)
			}
			if n := fallbacks.Load(); n != 0 {
				t.Errorf("the fallback decided %d deductions that Redis had applied", n)
			}
			if n := degradedCount(t, reg); n != 0 {
				t.Errorf("lockgov_store_degraded_total = %v; a WAIT's lost reply is not a store failure", n)
			}
			resume()
			rp.CaughtUp(t)
			if left, err := q.Deduct(ctx, failoverKey, 2, "order-1"); err != nil || left != 7 {
				t.Fatalf("the retry of order-1 = %d, %v; want 7, nil (10 - 1 - 2, once)", left, err)
			}
		})
	}
}
