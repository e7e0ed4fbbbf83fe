package quota_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// The WAIT timeouts of replicaacktest, where no replica acknowledges and
// where one must through a link delayed by linkLatency.
const (
	ackTimeout        = replicaacktest.AckTimeout
	healthyAckTimeout = replicaacktest.HealthyAckTimeout
	linkLatency       = replicaacktest.LinkLatency
)

// TestReplicaAcks_AnAcknowledgedDeductionSurvivesFailover: with
// WithReplicaAcks(1, ...), a Deduct returns only once the replica has the
// deduction and its request-id record. The replication link delays every
// chunk by 300 ms and is closed (in-flight chunks dropped) as soon as
// Deduct returns; the primary is killed and the replica promoted. The
// promoted replica has the deduction (7 left, not 10), and the retry of
// the request id replays it instead of deducting again. Without the WAIT
// (the option ignored), Deduct returns before the delayed write reaches
// the replica and the link's close drops it: the retry deducts again.
func TestReplicaAcks_AnAcknowledgedDeductionSurvivesFailover(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 4} {
		t.Run(map[int]string{1: "one-bucket", 4: "four-shards"}[shards], func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := replicatedStock(t, ctx)
			q := newQuota(t, testenv.NewRedisClient(t, rp.Primary.Addr()), quota.WithShards(shards), quota.WithReplicaAcks(1, healthyAckTimeout))
			if err := q.Set(ctx, failoverKey, 10); err != nil { // the shards' split of 10
				t.Fatal(err)
			}
			rp.Link.SetLatency(linkLatency)
			first, err := q.Deduct(ctx, failoverKey, 2, "order-1")
			if err != nil {
				t.Fatalf("Deduct with a healthy replica: %v", err)
			}
			if err := rp.Link.Close(); err != nil { // replication ends here, in-flight chunks dropped
				t.Fatal(err)
			}
			promotedConn := replicaacktest.FailOver(t, rp)
			promoted := newQuota(t, promotedConn, quota.WithShards(shards))
			if got, err := promoted.Remaining(ctx, failoverKey); err != nil || got != 8 {
				t.Fatalf("the promoted replica has %d units, %v; want 8: the acknowledged deduction of 2 was lost", got, err)
			}
			again, err := promoted.Deduct(ctx, failoverKey, 2, "order-1")
			if err != nil || again != first {
				t.Fatalf("the retry of order-1 on the promoted replica = %d, %v; want the first answer %d, nil (a replay)", again, err, first)
			}
			if got, err := promoted.Remaining(ctx, failoverKey); err != nil || got != 8 {
				t.Fatalf("after the retry the promoted replica has %d units, %v; want 8: order-1 deducted twice", got, err)
			}
		})
	}
}

// TestReplicaAcks_UnacknowledgedWriteIsATypedErrorAndItsRetryAppliesOnce:
// with the only replica stopped, a Deduct asking for one acknowledgement
// deducts on the primary, hears from WAIT that no replica has it, and
// returns an error holding *NotReplicatedError{Acked 0, Wanted 1, Timeout
// 500ms}: not ErrInsufficient, not a store failure for WithFallback (the
// fallback is not called: the deduction is in Redis), counted as
// result="not_replicated". A retry with the same request id from another
// process (a new client: a connection that never wrote) while the replica
// is still stopped gets the same error, not a success: the replay writes
// its record again so that WAIT counts replicas that have it. Once the
// replica is back, the retry replays the first answer and the balance
// shows one deduction. A short Deduct (ErrInsufficient on the primary) and
// a Refund behave alike.
func TestReplicaAcks_UnacknowledgedWriteIsATypedErrorAndItsRetryAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := replicatedStock(t, ctx)
	reg := prometheus.NewPedanticRegistry()
	var fallbacks atomic.Int32
	fallback := func(context.Context, string, int64, string) (int64, error) {
		fallbacks.Add(1)
		return 0, nil
	}
	opts := []quota.Option{quota.WithReplicaAcks(1, ackTimeout), quota.WithFallback(fallback)}
	q := newQuota(t, testenv.NewRedisClient(t, rp.Primary.Addr()), append(opts, quota.WithRegisterer(reg), quota.WithPolicy(skuPolicy(t)))...)
	// another is a second process: its own client, its own connections.
	another := func() *quota.Quota {
		return newQuota(t, testenv.NewRedisClient(t, rp.Primary.Addr()), opts...)
	}
	resume := rp.PauseReplica(t)

	wantNotReplicated := func(what string, err error) {
		t.Helper()
		var nr *quota.NotReplicatedError
		if !errors.As(err, &nr) || !errors.Is(err, quota.ErrNotReplicated) {
			t.Fatalf("%s = %v; want a *NotReplicatedError", what, err)
		}
		replicaacktest.WantCounts(t, what, nr.Acked, nr.Wanted, nr.Timeout)
		if errors.Is(err, quota.ErrInsufficient) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s = %v; want neither ErrInsufficient nor a deadline", what, err)
		}
	}
	_, err := q.Deduct(ctx, failoverKey, 3, "order-1")
	wantNotReplicated("Deduct with the replica stopped", err)
	_, err = another().Deduct(ctx, failoverKey, 3, "order-1")
	wantNotReplicated("the retry from another process with the replica stopped", err)
	_, err = q.Deduct(ctx, failoverKey, 100, "order-2")
	wantNotReplicated("a short Deduct with the replica stopped", err)
	_, err = another().Refund(ctx, failoverKey, 1, "refund-1")
	wantNotReplicated("Refund with the replica stopped", err)
	if n := fallbacks.Load(); n != 0 {
		t.Fatalf("the fallback decided %d unacknowledged deductions that Redis had applied", n)
	}
	if got := counter(t, reg, "not_replicated"); got != 2 { // q's two Deducts
		t.Fatalf(`lockgov_quota_deduct_total{result="not_replicated"} = %v, want 2`, got)
	}

	resume()
	rp.CaughtUp(t)
	left, err := another().Deduct(ctx, failoverKey, 3, "order-1")
	if err != nil || left != 7 {
		t.Fatalf("the retry of order-1 after the replica returned = %d, %v; want 7, nil (the first answer)", left, err)
	}
	if _, err := q.Deduct(ctx, failoverKey, 100, "order-2"); !errors.Is(err, quota.ErrInsufficient) {
		t.Fatalf("the retry of order-2 = %v; want ErrInsufficient (the first answer)", err)
	}
	if left, err := q.Refund(ctx, failoverKey, 1, "refund-1"); err != nil || left != 8 {
		t.Fatalf("the retry of refund-1 = %d, %v; want 8, nil", left, err)
	}
	if got, err := q.Remaining(ctx, failoverKey); err != nil || got != 8 {
		t.Fatalf("Remaining = %d, %v; want 8: 10 - 3 (once) + 1 (once)", got, err)
	}
	if got := counter(t, reg, "replay"); got != 0 {
		// The retry of order-1 went through another process's Quota.
		t.Fatalf(`replays counted on q = %v, want 0`, got)
	}
	if got := counter(t, reg, "replay_insufficient"); got != 1 {
		t.Fatalf(`lockgov_quota_deduct_total{result="replay_insufficient"} = %v, want 1`, got)
	}
	if n := degradedCount(t, reg); n != 0 {
		t.Fatalf("lockgov_store_degraded_total = %v: a not-replicated answer is not a store failure", n)
	}
}

// TestReplicaAcks_TheWaitFitsTheCallersDeadline: a caller whose deadline
// leaves less than the WAIT timeout gets a WAIT cut to it (less the
// margin for the late reply), and, with the replica stopped, an error
// wrapping context.DeadlineExceeded with the counts, not a WAIT that
// outlasts the caller.
func TestReplicaAcks_TheWaitFitsTheCallersDeadline(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := replicatedStock(t, ctx)
	q := newQuota(t, testenv.NewRedisClient(t, rp.Primary.Addr()), quota.WithReplicaAcks(1, healthyAckTimeout))
	rp.PauseReplica(t)
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := q.Deduct(dctx, failoverKey, 1, "order-1")
	var nr *quota.NotReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Deduct = %v; want a *NotReplicatedError and context.DeadlineExceeded", err)
	}
	if nr.Timeout >= 2*time.Second || nr.Timeout <= 0 {
		t.Fatalf("WAIT was sent with %v; want less than the caller's 2s", nr.Timeout)
	}
}

// TestReplicaAcks_AWaitReplyAfterTheDeadlineIsTheDeadlineNotAStoreFailure:
// the flake of TestReplicaAcks_TheWaitFitsTheCallersDeadline under load,
// made certain. The WAIT is cut to the caller's deadline less the margin
// for its reply, and the reply comes later still (a proxy delays it 300 ms
// each way): go-redis times the read out at the caller's deadline, after
// the script's answer. The deduction ran; whether the replicas have it is
// unknown. Deduct must say so with a *NotReplicatedError that wraps
// context.DeadlineExceeded, as when the reply is in time: not the bare
// i/o timeout, which storefail.Unavailable reads as a store failure. The
// fallback does not decide it, and it counts as not_replicated, with no
// degraded decision.
func TestReplicaAcks_AWaitReplyAfterTheDeadlineIsTheDeadlineNotAStoreFailure(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := replicaacktest.LateWait(t, func(c *redis.Client) {
		if err := newQuota(t, c).Set(ctx, failoverKey, 10); err != nil {
			t.Fatal(err)
		}
		// WAIT 1 1 on a server without replicas: loads the scripts.
		_, err := newQuota(t, c, quota.WithReplicaAcks(1, time.Millisecond)).Deduct(ctx, failoverKey, 1, "warm")
		if !errors.Is(err, quota.ErrNotReplicated) {
			t.Fatalf("the warm-up Deduct = %v; want ErrNotReplicated (no replica)", err)
		}
	})
	reg := prometheus.NewPedanticRegistry()
	var fallbacks atomic.Int32
	q := newQuota(t, c, quota.WithReplicaAcks(1, healthyAckTimeout), quota.WithRegisterer(reg), quota.WithPolicy(skuPolicy(t)),
		quota.WithFallback(func(context.Context, string, int64, string) (int64, error) {
			fallbacks.Add(1)
			return 0, nil
		}))
	dctx, cancel := context.WithTimeout(ctx, replicaacktest.LateWaitDeadline)
	defer cancel()
	_, err := q.Deduct(dctx, failoverKey, 2, "order-1")
	var nr *quota.NotReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, quota.ErrNotReplicated) {
		t.Fatalf("Deduct = %v; want a *NotReplicatedError and context.DeadlineExceeded", err)
	}
	if storefail.Unavailable(err) {
		t.Fatalf("Deduct = %v reads as a store failure", err)
	}
	if nr.Acked != 0 || nr.Wanted != 1 || nr.Timeout <= 0 || nr.Timeout >= replicaacktest.LateWaitDeadline {
		t.Fatalf("Deduct = %v; want 0 of 1 within less than the caller's %v", err, replicaacktest.LateWaitDeadline)
	}
	if n := fallbacks.Load(); n != 0 {
		t.Fatalf("the fallback decided a deduction that Redis had applied (%d calls)", n)
	}
	if got := counter(t, reg, "not_replicated"); got != 1 {
		t.Fatalf(`lockgov_quota_deduct_total{result="not_replicated"} = %v, want 1`, got)
	}
	if n := degradedCount(t, reg); n != 0 {
		t.Fatalf("lockgov_store_degraded_total = %v: a late WAIT reply is not a store failure", n)
	}
	if got, err := q.Remaining(ctx, failoverKey); err != nil || got != 7 {
		t.Fatalf("Remaining = %d, %v; want 7: 10 - 1 (warm-up) - 2 (on the primary)", got, err)
	}
}

// TestReplicaAcks_DefaultSendsWhatItSentBefore: without WithReplicaAcks,
// Deduct, a replayed Deduct and Refund each send one EVALSHA, alone, as
// before the option existed: no pipeline, no WAIT, no touch. With it,
// each is one pipeline of the script, the touch and WAIT (the control:
// the hook sees pipelines).
func TestReplicaAcks_DefaultSendsWhatItSentBefore(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	rp := replicatedStock(t, ctx)
	for _, tc := range []struct {
		name  string
		opts  []quota.Option
		sent  string
		piped string
	}{
		{"default", nil, "evalsha evalsha evalsha", ""},
		{"acks", []quota.Option{quota.WithReplicaAcks(1, healthyAckTimeout)}, "", "evalsha evalsha wait|evalsha evalsha wait|evalsha evalsha wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testenv.NewRedisClient(t, rp.Primary.Addr())
			q := newQuota(t, c, tc.opts...)
			// Load the scripts first, so that no NOSCRIPT fallback shows.
			if _, err := q.Deduct(ctx, failoverKey, 1, "warm-"+tc.name); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Refund(ctx, failoverKey, 1, "warm-refund-"+tc.name); err != nil {
				t.Fatal(err)
			}
			h := &replicaacktest.Commands{}
			c.AddHook(h)
			for _, id := range []string{"order-" + tc.name, "order-" + tc.name} {
				if _, err := q.Deduct(ctx, failoverKey, 1, id); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := q.Refund(ctx, failoverKey, 1, "refund-"+tc.name); err != nil {
				t.Fatal(err)
			}
			h.WantSent(t, tc.sent, tc.piped)
		})
	}
}

// TestWithReplicaAcks_RefusesBadValuesAndClientsWithoutOneConnection: New
// refuses each bad use of WithReplicaAcks with an error naming it.
func TestWithReplicaAcks_RefusesBadValuesAndClientsWithoutOneConnection(t *testing.T) {
	t.Parallel()
	c := replicaacktest.WantRefusals(t, func(c redis.UniversalClient, opt quota.Option) error {
		_, err := quota.New(c, opt)
		return err
	}, []replicaacktest.Refusal[quota.Option]{
		{Name: "no replica", Opt: quota.WithReplicaAcks(0, time.Second), Want: "WithReplicaAcks(0, 1s): replica count 0 must be >= 1"},
		{Name: "negative count", Opt: quota.WithReplicaAcks(-1, time.Second), Want: "replica count -1 must be >= 1"},
		{Name: "zero timeout", Opt: quota.WithReplicaAcks(1, 0), Want: "timeout 0s must be > 0"},
		{Name: "timeout at the read timeout", Opt: quota.WithReplicaAcks(1, 5*time.Second), Want: "timeout 5s must be at most 4.75s"},
		{Name: "cluster", Opt: quota.WithReplicaAcks(1, time.Second), Cluster: true, Want: "needs a *redis.Client"},
	})
	if _, err := quota.New(c, quota.WithReplicaAcks(1, 4750*time.Millisecond)); err != nil {
		t.Fatalf("New refused a timeout of ReadTimeout less the margin: %v", err)
	}
}

// TestReplicaAcks_AServerWithoutTheScriptsCostsNoWastedWait: a WAIT
// pipelined behind an EVALSHA that the server answers NOSCRIPT waits for a
// write that did not happen, and with too few replicas (here none: WAIT 1
// answers 0 only at its timeout) for its whole timeout, before the EVAL
// sent again waits its own. A new Quota sends its scripts with EVAL until
// the server has run them, so its first Deduct and first Refund each cost
// one WAIT (the touch, run by the Deduct, goes out with EVALSHA in the
// Refund); once they ran, EVALSHA. After SCRIPT FLUSH (a restart, a
// failover to a replica that never ran them) the first call pays the
// NOSCRIPT once, and the Quota then takes every script as missing: the
// next call's other script goes out with EVAL, not into a second wasted
// WAIT. That one call's WAITs together get the timeout: the EVAL's WAIT
// gets what the wasted one left. The pipelines and the WAITs' timeouts are
// counted, not timed: before, each first call was "evalsha evalsha
// wait|eval eval wait" with two full timeouts, nine WAITs here instead of
// six, and the call after the flush waited 1000 ms instead of 501.
func TestReplicaAcks_AServerWithoutTheScriptsCostsNoWastedWait(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := single(t)
	if err := newQuota(t, c).Set(ctx, failoverKey, 10); err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, c, quota.WithReplicaAcks(1, ackTimeout))
	h := &replicaacktest.Commands{}
	c.AddHook(h)
	calls := []struct {
		name         string
		call         func() error
		piped, waits string
	}{
		{"the first Deduct", func() error { _, err := q.Deduct(ctx, failoverKey, 1, "order-1"); return err }, "eval eval wait", "500"},
		{"the first Refund", func() error { _, err := q.Refund(ctx, failoverKey, 1, "refund-1"); return err }, "eval evalsha wait", "500"},
		{"a Deduct once the scripts ran", func() error { _, err := q.Deduct(ctx, failoverKey, 1, "order-2"); return err }, "evalsha evalsha wait", "500"},
		{"SCRIPT FLUSH", func() error { return c.ScriptFlush(ctx).Err() }, "", ""},
		// The WAIT behind the NOSCRIPT answered 0 of 1: it waited its whole
		// 500 ms, and the call's WAITs together get the timeout: 1 ms left.
		{"the first Deduct after the flush", func() error { _, err := q.Deduct(ctx, failoverKey, 1, "order-3"); return err }, "evalsha evalsha wait|eval eval wait", "500 1"},
		{"the first Refund after the flush", func() error { _, err := q.Refund(ctx, failoverKey, 1, "refund-2"); return err }, "eval evalsha wait", "500"},
	}
	var piped, waits string
	for _, tc := range calls {
		err := tc.call()
		if tc.piped != "" && !errors.Is(err, quota.ErrNotReplicated) {
			t.Fatalf("%s = %v; want ErrNotReplicated (no replica)", tc.name, err)
		}
		if tc.piped == "" && err != nil {
			t.Fatal(err)
		}
		p, w := h.Piped(), h.Waits()
		got, gotWaits := strings.TrimPrefix(strings.TrimPrefix(p, piped), "|"), strings.TrimSpace(strings.TrimPrefix(w, waits))
		piped, waits = p, w
		if got != tc.piped || gotWaits != tc.waits {
			t.Errorf("%s sent the pipelines %q with WAIT timeouts %q, want %q with %q", tc.name, got, gotWaits, tc.piped, tc.waits)
		}
	}
	if got, err := q.Remaining(ctx, failoverKey); err != nil || got != 9 {
		t.Fatalf("Remaining = %d, %v; want 9: 10 - 3 + 2, each once", got, err)
	}
}

// TestReplicaAcks_AServerWithoutTheScriptsStillWaits: after SCRIPT FLUSH
// (a restarted or failed-over server), a Deduct with WithReplicaAcks that
// has run its scripts before (the warm-up: a new Quota sends them with
// EVAL) falls back to EVAL for the script and the touch, with its own
// WAIT: it succeeds with a healthy replica, and fails with
// *NotReplicatedError, not NOSCRIPT, with the replica stopped. A server
// that has deduct.lua (loaded by a Quota without the option) but not
// touch.lua gets the touch and WAIT again without the script: the
// deduction runs once and is counted as ok, not as a replay of itself.
func TestReplicaAcks_AServerWithoutTheScriptsStillWaits(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := replicatedStock(t, ctx)
	c := testenv.NewRedisClient(t, rp.Primary.Addr())
	reg := prometheus.NewPedanticRegistry()
	q := newQuota(t, c, quota.WithReplicaAcks(1, ackTimeout), quota.WithRegisterer(reg), quota.WithPolicy(skuPolicy(t)))
	h := &replicaacktest.Commands{}
	c.AddHook(h)
	flush := func() {
		t.Helper()
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := q.Deduct(ctx, failoverKey, 1, "warm"); err != nil {
		t.Fatal(err)
	}
	flush()
	if _, err := newQuota(t, testenv.NewRedisClient(t, rp.Primary.Addr())).Deduct(ctx, failoverKey, 1, "loads-deduct"); err != nil {
		t.Fatal(err)
	}
	if left, err := q.Deduct(ctx, failoverKey, 1, "order-1"); err != nil || left != 7 {
		t.Fatalf("Deduct with only deduct.lua cached = %d, %v; want 7, nil", left, err)
	}
	if ok, replay := counter(t, reg, "ok"), counter(t, reg, "replay"); ok != 2 || replay != 0 {
		t.Fatalf("the warm-up and the first deduction of order-1 counted ok %v, replay %v; want ok 2, replay 0", ok, replay)
	}

	flush()
	if left, err := q.Deduct(ctx, failoverKey, 1, "order-2"); err != nil || left != 6 {
		t.Fatalf("Deduct after SCRIPT FLUSH = %d, %v; want 6, nil", left, err)
	}
	flush()
	rp.PauseReplica(t)
	_, err := q.Deduct(ctx, failoverKey, 1, "order-3")
	var nr *quota.NotReplicatedError
	if !errors.As(err, &nr) {
		t.Fatalf("Deduct after SCRIPT FLUSH with the replica stopped = %v; want a *NotReplicatedError", err)
	}
	want := "eval eval wait|evalsha evalsha wait|eval wait|evalsha evalsha wait|eval eval wait|evalsha evalsha wait|eval eval wait"
	if got := h.Piped(); got != want { // without a new connection's handshake
		t.Fatalf("pipelines: %q, want %q", got, want)
	}
}
