package idempotency_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
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

// wantNotReplicated fails the test unless err holds a *NotReplicatedError
// saying 0 of 1 replicas acknowledged within ackTimeout.
func wantNotReplicated(t *testing.T, what string, err error) {
	t.Helper()
	var nr *idempotency.NotReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, idempotency.ErrNotReplicated) {
		t.Fatalf("%s = %v; want a *NotReplicatedError", what, err)
	}
	replicaacktest.WantCounts(t, what, nr.Acked, nr.Wanted, nr.Timeout)
}

// recordState is the st field of key's record on c ("" when absent).
func recordState(t *testing.T, ctx context.Context, c *redis.Client, key string) string {
	t.Helper()
	return c.HGet(ctx, idempotency.DefaultPrefix+"{"+key+"}", "st").Val()
}

// TestReplicaAcks_ACompletedRecordSurvivesFailover: with
// WithReplicaAcks(1, ...), Do returns fn's result only once the replica has
// the completed record. The replication link delays every chunk by 300 ms
// and is closed (in-flight chunks dropped) as soon as Do returns; the
// primary is killed and the replica promoted. The retry on the promoted
// replica replays the result and fn has run once. Without the WAIT (the
// option ignored), Do returns before the delayed record reaches the
// replica, the link's close drops it, and the retry runs fn again.
func TestReplicaAcks_ACompletedRecordSurvivesFailover(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := testenv.NewReplicated(t)
	s := newStore(t, testenv.NewRedisClient(t, rp.Primary.Addr()), idempotency.WithReplicaAcks(1, healthyAckTimeout))
	var runs atomic.Int32

	rp.Link.SetLatency(linkLatency)
	res, err := s.Do(ctx, "pay:order-1", []byte("fp"), counted(&runs))
	if err != nil || res.Replayed || string(res.Body) != "charged" {
		t.Fatalf("Do with a healthy replica = %+v, %v; want the first run's result", res, err)
	}
	if err := rp.Link.Close(); err != nil { // replication ends here, in-flight chunks dropped
		t.Fatal(err)
	}
	promoted := failOver(t, rp)

	res, err = promoted.Do(ctx, "pay:order-1", []byte("fp"), counted(&runs))
	if err != nil || !res.Replayed || string(res.Body) != "charged" || runs.Load() != 1 {
		t.Fatalf("the retry on the promoted replica = %+v, %v with fn run %d times; want the replay and one run", res, err, runs.Load())
	}
}

// TestReplicaAcks_AnUnacknowledgedClaimRunsNoFn: with the only replica
// stopped, Do claims the key on the primary, hears from WAIT that no
// replica has the claim, and returns a *NotReplicatedError without running
// fn (a failover to the replica would forget the claim and let another
// attempt run fn beside it), counted as outcome not_replicated. The claim
// is released, so once the replica is back the next Do runs fn at once,
// as the second attempt.
func TestReplicaAcks_AnUnacknowledgedClaimRunsNoFn(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := testenv.NewReplicated(t)
	cp := testenv.NewRedisClient(t, rp.Primary.Addr())
	reg := prometheus.NewPedanticRegistry()
	s := newStore(t, cp, idempotency.WithReplicaAcks(1, ackTimeout), idempotency.WithRegisterer(reg))
	var runs atomic.Int32
	resume := rp.PauseReplica(t)

	_, err := s.Do(ctx, "pay:order-1", []byte("fp"), counted(&runs))
	wantNotReplicated(t, "Do with the replica stopped", err)
	if n := runs.Load(); n != 0 {
		t.Fatalf("fn ran %d times on a claim no replica had", n)
	}
	if st := recordState(t, ctx, cp, "pay:order-1"); st != "free" {
		t.Fatalf("the unacknowledged claim left the record %q, want it released (free)", st)
	}
	if got := testutil.ToFloat64(s.OutcomeCounter("not_replicated")); got != 1 {
		t.Fatalf(`outcome="not_replicated" = %v, want 1`, got)
	}

	resume()
	rp.CaughtUp(t)
	var attempt idempotency.Attempt
	res, err := s.Do(ctx, "pay:order-1", []byte("fp"), func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
		attempt = a
		return counted(&runs)(ctx, a)
	})
	if err != nil || res.Replayed || runs.Load() != 1 || attempt.N != 2 {
		t.Fatalf("Do after the replica returned = %+v, %v, fn run %d times as attempt %d; want one run, attempt 2", res, err, runs.Load(), attempt.N)
	}
}

// TestReplicaAcks_AnUnacknowledgedCompletionReturnsTheResultAndItsRetryReplays:
// the replica acknowledges the claim and is stopped while fn runs, so no
// replica acknowledges the completed record. Do returns fn's result with a
// *NotReplicatedError (not Degraded, under FailOpen too: the store
// answered), counted as outcome not_replicated; the record stays completed
// on the primary. A retry from another process (its own client) while the
// replica is stopped gets the stored result with the same error and does
// not run fn: a replay is reported only once the replicas have the record.
// Once the replica is back the retry replays; fn has run once.
func TestReplicaAcks_AnUnacknowledgedCompletionReturnsTheResultAndItsRetryReplays(t *testing.T) {
	t.Parallel()
	for _, policy := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := testenv.NewReplicated(t)
			cp := testenv.NewRedisClient(t, rp.Primary.Addr())
			reg := prometheus.NewPedanticRegistry()
			opts := []idempotency.Option{idempotency.WithReplicaAcks(1, ackTimeout), idempotency.WithStoreFailure(policy)}
			s := newStore(t, cp, append(opts, idempotency.WithRegisterer(reg))...)
			var runs atomic.Int32
			var resume func()
			// The claim must be acknowledged within ackTimeout: a replica just
			// synced may not acknowledge at once (once, on a loaded machine, it
			// did not, and fn never ran).
			rp.CaughtUp(t)

			res, err := s.Do(ctx, "pay:order-1", []byte("fp"), func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
				resume = rp.PauseReplica(t) // after the claim was acknowledged
				return counted(&runs)(ctx, a)
			})
			wantNotReplicated(t, "Do whose record no replica acknowledged", err)
			if string(res.Body) != "charged" || res.Replayed || res.Degraded {
				t.Fatalf("Do = %+v; want fn's result, neither replayed nor degraded", res)
			}
			if st := recordState(t, ctx, cp, "pay:order-1"); st != "done" {
				t.Fatalf("the record is %q on the primary, want done: fn's effect happened", st)
			}
			if got := testutil.ToFloat64(s.OutcomeCounter("not_replicated")); got != 1 {
				t.Fatalf(`outcome="not_replicated" = %v, want 1`, got)
			}
			if n := degradedCount(t, reg, "idempotency"); n != 0 {
				t.Fatalf("lockgov_store_degraded_total = %v: a not-replicated record is not a store failure", n)
			}

			another := newStore(t, testenv.NewRedisClient(t, rp.Primary.Addr()), opts...)
			res, err = another.Do(ctx, "pay:order-1", []byte("fp"), counted(&runs))
			wantNotReplicated(t, "the retry from another process with the replica stopped", err)
			if string(res.Body) != "charged" || !res.Replayed {
				t.Fatalf("the retry = %+v; want the stored result, replayed", res)
			}

			resume()
			rp.CaughtUp(t)
			res, err = another.Do(ctx, "pay:order-1", []byte("fp"), counted(&runs))
			if err != nil || !res.Replayed || string(res.Body) != "charged" || runs.Load() != 1 {
				t.Fatalf("the retry after the replica returned = %+v, %v, fn run %d times; want the replay and one run", res, err, runs.Load())
			}
		})
	}
}

// TestReplicaAcks_TheMiddlewareAnswers503UntilTheResponseIsReplicated:
// behind the middleware, a handler whose response no replica acknowledged
// gets 503 with Retry-After (not its response: the client would take it
// for done while a failover can still lose it); the retry after the
// replica is back replays the response without running the handler again.
//
// The handler runs only once the healthy replica has acknowledged the
// claim, so the WAIT is given healthyAckTimeout, the timeout where a
// replica must acknowledge, not ackTimeout (500 ms, where none does): with
// that, beside a CPU burner, the replica was once not scheduled in time,
// the claim was released unacknowledged, the handler never ran and the 503
// came from the claim. The stopped replica then costs the completion the
// whole healthyAckTimeout.
func TestReplicaAcks_TheMiddlewareAnswers503UntilTheResponseIsReplicated(t *testing.T) {
	t.Parallel()
	rp := testenv.NewReplicated(t)
	s := newStore(t, testenv.NewRedisClient(t, rp.Primary.Addr()), idempotency.WithReplicaAcks(1, healthyAckTimeout))
	var runs atomic.Int32
	var resume func()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			resume = rp.PauseReplica(t)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
	})
	srv := httptest.NewServer(idempotency.Middleware(s)(h))
	defer srv.Close()
	post := func() *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(idempotency.Header, "order-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	if resp := post(); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the unreplicated response: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resume == nil {
		t.Fatal("the handler never ran: the 503 was the claim's, not the response's")
	}
	resume()
	rp.CaughtUp(t)
	resp := post()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || string(body) != "charged" || runs.Load() != 1 {
		t.Fatalf("the retry: %d %q, handler run %d times; want the replayed 201 and one run", resp.StatusCode, body, runs.Load())
	}
}

// TestReplicaAcks_AClaimsWaitReplyAfterTheDeadlineIsTheDeadlineNotAStoreFailure:
// the claim's WAIT is cut to the caller's deadline less the margin for its
// reply, and the reply comes later still (a proxy delays it 300 ms each
// way, as a loaded machine may): go-redis times the read out at the
// caller's deadline, after begin.lua's answer. Do must say the claim's
// replication is unknown with a *NotReplicatedError that wraps
// context.DeadlineExceeded, run no fn and release the claim, under
// FailOpen too: not the bare i/o timeout, which storefail.Unavailable
// reads as a store failure, and no degraded decision.
func TestReplicaAcks_AClaimsWaitReplyAfterTheDeadlineIsTheDeadlineNotAStoreFailure(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := replicaacktest.LateWait(t, func(c *redis.Client) {
		// WAIT 1 1 on a server without replicas: loads begin.lua and touch.lua.
		_, err := newStore(t, c, idempotency.WithReplicaAcks(1, time.Millisecond)).Do(ctx, "warm", nil, nil2)
		if !errors.Is(err, idempotency.ErrNotReplicated) {
			t.Fatalf("the warm-up Do = %v; want ErrNotReplicated (no replica)", err)
		}
	})
	reg := prometheus.NewPedanticRegistry()
	s := newStore(t, c, idempotency.WithReplicaAcks(1, healthyAckTimeout), idempotency.WithStoreFailure(instrument.FailOpen), idempotency.WithRegisterer(reg))
	dctx, cancel := context.WithTimeout(ctx, replicaacktest.LateWaitDeadline)
	defer cancel()
	var runs atomic.Int32
	res, err := s.Do(dctx, "pay:order-1", []byte("fp"), counted(&runs))
	var nr *idempotency.NotReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, idempotency.ErrNotReplicated) {
		t.Fatalf("Do = %+v, %v; want a *NotReplicatedError and context.DeadlineExceeded", res, err)
	}
	if storefail.Unavailable(err) {
		t.Fatalf("Do = %v reads as a store failure", err)
	}
	if runs.Load() != 0 || res.Degraded {
		t.Fatalf("Do = %+v with fn run %d times; want no run, not degraded", res, runs.Load())
	}
	if n := degradedCount(t, reg, "idempotency"); n != 0 {
		t.Fatalf("lockgov_store_degraded_total = %v: a late WAIT reply is not a store failure", n)
	}
	if got := testutil.ToFloat64(s.OutcomeCounter("not_replicated")); got != 1 {
		t.Fatalf(`the not_replicated outcome counted %v, want 1`, got)
	}
	if st := recordState(t, ctx, c, "pay:order-1"); st != "free" {
		t.Fatalf("the claim is %q on the primary; want it released (free)", st)
	}
}

// TestReplicaAcks_TheWaitFitsTheCallersDeadline: a caller whose deadline
// leaves less than the WAIT timeout gets a WAIT cut to it (less the margin
// for the late reply) and, with the replica stopped, an error wrapping
// context.DeadlineExceeded with the counts: for the claim (fn does not
// run) and for the completed record, whose write runs under a deadline of
// its own (it must store fn's result even past the caller's) while its
// WAIT still ends by the caller's.
func TestReplicaAcks_TheWaitFitsTheCallersDeadline(t *testing.T) {
	t.Parallel()
	for _, stopWhen := range []string{"claim", "completion"} {
		t.Run(stopWhen, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := testenv.NewReplicated(t)
			s := newStore(t, testenv.NewRedisClient(t, rp.Primary.Addr()), idempotency.WithReplicaAcks(1, healthyAckTimeout))
			if stopWhen == "claim" {
				rp.PauseReplica(t)
			}
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var runs atomic.Int32
			_, err := s.Do(dctx, "pay:order-1", []byte("fp"), func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
				rp.PauseReplica(t)
				return counted(&runs)(ctx, a)
			})
			var nr *idempotency.NotReplicatedError
			if !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Do = %v; want a *NotReplicatedError and context.DeadlineExceeded", err)
			}
			if nr.Timeout >= 2*time.Second || nr.Timeout <= 0 {
				t.Fatalf("WAIT was sent with %v; want less than the caller's 2s", nr.Timeout)
			}
			if want := map[string]int32{"claim": 0, "completion": 1}[stopWhen]; runs.Load() != want {
				t.Fatalf("fn ran %d times, want %d", runs.Load(), want)
			}
		})
	}
}

// TestReplicaAcks_DefaultSendsWhatItSentBefore: without WithReplicaAcks, a
// first Do sends two EVALSHAs (begin, finish) and a replay one, each alone,
// as before the option existed: no pipeline, no WAIT, no touch. With it,
// each is one pipeline of the script, the touch and WAIT (the control: the
// hook sees pipelines).
func TestReplicaAcks_DefaultSendsWhatItSentBefore(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	rp := testenv.NewReplicated(t)
	for _, tc := range []struct {
		name  string
		opts  []idempotency.Option
		sent  string
		piped string
	}{
		{"default", nil, "evalsha evalsha evalsha", ""},
		{"acks", []idempotency.Option{idempotency.WithReplicaAcks(1, healthyAckTimeout)}, "", "evalsha evalsha wait|evalsha evalsha wait|evalsha evalsha wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testenv.NewRedisClient(t, rp.Primary.Addr())
			s := newStore(t, c, tc.opts...)
			var runs atomic.Int32
			// Load the scripts first, so that no NOSCRIPT fallback shows.
			if _, err := s.Do(ctx, "warm-"+tc.name, nil, counted(&runs)); err != nil {
				t.Fatal(err)
			}
			h := &replicaacktest.Commands{}
			c.AddHook(h)
			for range 2 { // the first run, then a replay
				if _, err := s.Do(ctx, "pay:"+tc.name, []byte("fp"), counted(&runs)); err != nil {
					t.Fatal(err)
				}
			}
			h.WantSent(t, tc.sent, tc.piped)
		})
	}
}

// TestWithReplicaAcks_RefusesBadValuesAndClientsWithoutOneConnection: New
// refuses each bad use of WithReplicaAcks with an error naming it.
func TestWithReplicaAcks_RefusesBadValuesAndClientsWithoutOneConnection(t *testing.T) {
	t.Parallel()
	replicaacktest.WantRefusals(t, func(c redis.UniversalClient, opt idempotency.Option) error {
		_, err := idempotency.New(c, opt)
		return err
	}, []replicaacktest.Refusal[idempotency.Option]{
		{Name: "no replica", Opt: idempotency.WithReplicaAcks(0, time.Second), Want: "WithReplicaAcks(0, 1s): replica count 0 must be >= 1"},
		{Name: "negative timeout", Opt: idempotency.WithReplicaAcks(1, -time.Second), Want: "timeout -1s must be > 0"},
		{Name: "timeout over the read timeout", Opt: idempotency.WithReplicaAcks(1, 4800*time.Millisecond), Want: "timeout 4.8s must be at most 4.75s"},
		{Name: "cluster", Opt: idempotency.WithReplicaAcks(1, time.Second), Cluster: true, Want: "needs a *redis.Client"},
	})
}
