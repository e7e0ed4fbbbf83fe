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
	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// warmAckedQuota is a Quota on c with WithReplicaAcks(1,
// healthyAckTimeout), opts and a fallback that counts its calls. A first
// Deduct of 1 from failoverKey (9 left) has loaded its scripts, so that
// the pipelines the tests break are the EVALSHAs', and opened a
// connection.
func warmAckedQuota(t *testing.T, ctx context.Context, c *redis.Client, opts ...quota.Option) (*quota.Quota, *atomic.Int32) {
	t.Helper()
	var fallbacks atomic.Int32
	q := newQuota(t, c, append(opts, quota.WithReplicaAcks(1, healthyAckTimeout),
		quota.WithFallback(func(context.Context, string, int64, string) (int64, error) {
			fallbacks.Add(1)
			return 0, nil
		}))...)
	if _, err := q.Deduct(ctx, failoverKey, 1, "warm"); err != nil {
		t.Fatal(err)
	}
	return q, &fallbacks
}

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
	t.Parallel()
	for _, tc := range replicaacktest.LostWaits {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := replicatedStock(t, ctx)
			c := replicaacktest.ClientWith(t, rp.Primary.Addr(), tc.Set)
			reg := prometheus.NewPedanticRegistry()
			q, fallbacks := warmAckedQuota(t, ctx, c, quota.WithRegisterer(reg))
			resume := rp.PauseReplica(t)
			errc := make(chan error, 1)
			go func() {
				_, err := q.Deduct(ctx, failoverKey, 2, "order-1")
				errc <- err
			}()
			for range tc.Kills {
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

// TestReplicaAcks_AWaitAnsweredAfterTheCallersDeadlineIsNotReplicated: the
// client reaches the primary through a proxy that delays every chunk by
// 500 ms, the replica is stopped, the caller's deadline is 3 s. WAIT is
// cut to the deadline less the margin (2.75 s), but it starts half a
// second late and its reply is half a second on the way back, after the
// deadline: the script's reply (at about 1 s) was read, the WAIT's read
// ends with the deadline. (Were the WAIT's reply in time, it would say 0
// acknowledgements: the same answer.) Deduct must return by the caller's
// deadline an error that says not replicated (the deduction is in Redis),
// not a success, not the fallback's; the retry after the replica is back
// replays it.
func TestReplicaAcks_AWaitAnsweredAfterTheCallersDeadlineIsNotReplicated(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := replicatedStock(t, ctx)
	px := testenv.NewProxy(t, rp.Primary.Addr())
	q, fallbacks := warmAckedQuota(t, ctx, testenv.NewRedisClient(t, px.Addr())) // connected before the delay
	resume := rp.PauseReplica(t)
	px.SetLatency(500 * time.Millisecond)
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := q.Deduct(dctx, failoverKey, 2, "order-1")
	if !errors.Is(err, quota.ErrNotReplicated) {
		t.Errorf("Deduct whose WAIT answered after the deadline = %v; want ErrNotReplicated", err)
	}
	if n := fallbacks.Load(); n != 0 {
		t.Errorf("the fallback decided %d deductions that Redis had applied", n)
	}
	px.SetLatency(0)
	resume()
	rp.CaughtUp(t)
	if left, err := q.Deduct(ctx, failoverKey, 2, "order-1"); err != nil || left != 7 {
		t.Fatalf("the retry of order-1 = %d, %v; want 7, nil (10 - 1 - 2, once)", left, err)
	}
}

// TestReplicaAcks_AResentDeductWaitsAgainAndDeductsOnce: the reply of a
// Deduct's whole pipeline (script, touch, WAIT) is lost after it ran on
// the primary (the proxy drops it), and go-redis resends the pipeline on
// another connection after its 2 s read timeout. The resend replays the
// record: it must deduct nothing more, and it must itself wait for the
// replica before Deduct reports success: with the replica stopped it is
// ErrNotReplicated, not the replay's answer; with the replica running it
// is the first answer, and the replica has the record.
func TestReplicaAcks_AResentDeductWaitsAgainAndDeductsOnce(t *testing.T) {
	t.Parallel()
	for _, stopped := range []bool{false, true} {
		t.Run(map[bool]string{false: "replica running", true: "replica stopped"}[stopped], func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := replicatedStock(t, ctx)
			c, px := replicaacktest.ResendingClient(t, rp)
			q := newQuota(t, c, quota.WithReplicaAcks(1, ackTimeout))
			if _, err := q.Deduct(ctx, failoverKey, 1, "warm"); err != nil { // loads the scripts
				t.Fatal(err)
			}
			resume := func() {}
			if stopped {
				resume = rp.PauseReplica(t)
			}
			dropped := px.DropNextReply()
			left, err := q.Deduct(ctx, failoverKey, 2, "order-1")
			replicaacktest.WantDropped(t, dropped)
			switch {
			case stopped && !errors.Is(err, quota.ErrNotReplicated):
				t.Fatalf("the resent Deduct with the replica stopped = %d, %v; want ErrNotReplicated", left, err)
			case !stopped && (err != nil || left != 7):
				t.Fatalf("the resent Deduct = %d, %v; want 7, nil", left, err)
			}
			resume()
			rp.CaughtUp(t)
			rp.ReplicaHas(t, "one deduction of order-1", func(c *redis.Client) bool {
				return c.HGet(ctx, quota.DefaultPrefix+"{"+failoverKey+"}", "remain").Val() == "7"
			})
			if left, err := q.Deduct(ctx, failoverKey, 2, "order-1"); err != nil || left != 7 {
				t.Fatalf("the retry of order-1 = %d, %v; want 7, nil (10 - 1 - 2, once)", left, err)
			}
		})
	}
}
