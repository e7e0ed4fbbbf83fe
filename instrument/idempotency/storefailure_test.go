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
	"github.com/lockgov/lockgov/internal/testenv"
)

// durableRedis is a Redis that keeps its data across Kill and Restart
// (append-only file, fsync on every write), as a production one does.
func durableRedis(t *testing.T) (*testenv.Redis, *redis.Client) {
	t.Helper()
	r := testenv.NewRedis(t, testenv.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	return r, r.Client(t)
}

// restart brings r back and waits until c answers again.
func restart(t *testing.T, ctx context.Context, r *testenv.Redis, c redis.UniversalClient) {
	t.Helper()
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	for c.Ping(ctx).Err() != nil {
		if ctx.Err() != nil {
			t.Fatal("Redis did not answer after the restart")
		}
	}
}

func degradedCount(t *testing.T, reg *prometheus.Registry, component string) float64 {
	t.Helper()
	want := `lockgov_store_degraded_total{component="` + component + `"}`
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lockgov_store_degraded_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == component {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s", want)
	return 0
}

// TestStoreFailure_RedisKilled: with Redis killed, a fail-closed Store
// returns the transport error without running fn and its middleware answers
// 503; a fail-open Store runs fn (Degraded) and its middleware serves, with
// lockgov_store_degraded_total{component="idempotency"} counting each. Store
// answers still win under fail open (a mismatch is not degraded). When Redis
// returns, a key completed before the outage replays and fn does not run
// again.
func TestStoreFailure_RedisKilled(t *testing.T) {
	t.Parallel()
	r, c := durableRedis(t)
	reg := prometheus.NewPedanticRegistry()
	closed := newStore(t, c, idempotency.WithRegisterer(reg))
	open := newStore(t, c, idempotency.WithRegisterer(reg), idempotency.WithStoreFailure(instrument.FailOpen))
	ctx := timeout(t, 2*time.Minute)

	var runs atomic.Int64
	pay := func(context.Context, idempotency.Attempt) ([]byte, error) {
		runs.Add(1)
		return []byte("receipt-1"), nil
	}
	if _, err := open.Do(ctx, "paid", []byte("fp"), pay); err != nil {
		t.Fatal(err)
	}
	if _, err := open.Do(ctx, "paid", []byte("other"), pay); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("fail-open mismatch with Redis up: %v, want ErrFingerprintMismatch", err)
	}
	if n := degradedCount(t, reg, "idempotency"); n != 0 {
		t.Fatalf("degraded = %v with Redis up, want 0", n)
	}
	var handled atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		handled.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
	})
	post := func(h http.Handler, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("amount=1"))
		req.Header.Set(idempotency.Header, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	if w := post(idempotency.Middleware(open)(handler), "http-before"); w.Code != http.StatusCreated {
		t.Fatalf("middleware before the outage: %d", w.Code)
	}

	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	before := runs.Load()
	if _, err := closed.Do(ctx, "new", nil, pay); err == nil || runs.Load() != before {
		t.Fatalf("fail closed with Redis down: err %v, fn runs %d -> %d; want an error and no run", err, before, runs.Load())
	}
	if w := post(idempotency.Middleware(closed)(handler), "http-during"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("fail-closed middleware with Redis down: %d, Retry-After %q; want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	for i := range 3 {
		res, err := open.Do(ctx, "new", nil, pay)
		if err != nil || !res.Degraded || string(res.Body) != "receipt-1" {
			t.Fatalf("fail open with Redis down: %+v, %v; want fn's result, Degraded", res, err)
		}
		if n := degradedCount(t, reg, "idempotency"); n != float64(i+1) {
			t.Fatalf("degraded = %v after %d fail-open calls", n, i+1)
		}
	}
	h0 := handled.Load()
	if w := post(idempotency.Middleware(open)(handler), "http-during"); w.Code != http.StatusCreated || w.Body.String() != "charged" || handled.Load() != h0+1 {
		t.Fatalf("fail-open middleware with Redis down: %d %q; want the handler's 201", w.Code, w.Body.String())
	}
	if n := degradedCount(t, reg, "idempotency"); n != 4 {
		t.Fatalf("degraded = %v, want 4", n)
	}

	restart(t, ctx, r, c)
	before, h0 = runs.Load(), handled.Load()
	res, err := open.Do(ctx, "paid", []byte("fp"), pay)
	if err != nil || !res.Replayed || res.Degraded || string(res.Body) != "receipt-1" || runs.Load() != before {
		t.Fatalf("after Redis returned: %+v, %v, fn runs %d -> %d; want the stored replay, fn not run", res, err, before, runs.Load())
	}
	if w := post(idempotency.Middleware(open)(handler), "http-before"); w.Code != http.StatusCreated || handled.Load() != h0 {
		t.Fatalf("middleware replay after Redis returned: %d, handler runs %d -> %d; want the stored 201, no run", w.Code, h0, handled.Load())
	}
	if n := degradedCount(t, reg, "idempotency"); n != 4 {
		t.Fatalf("degraded = %v after Redis returned, want still 4", n)
	}
	if got := testutil.ToFloat64(closed.OutcomeCounter("degraded")); got != 4 {
		t.Fatalf(`lockgov_idempotency_requests_total{outcome="degraded"} = %v, want 4`, got)
	}
}

// The tests below on a 300ms-timeout client are not parallel: their margin is that
// read timeout, and they run before the package's parallel tests, not among them.
// (So is the deadline attack.)

// proxiedStore is a Store with policy on a Redis behind the fault proxy,
// through a client whose reads and writes time out after 300 ms and that
// never retries, and the registry it counts on.
func proxiedStore(t *testing.T, policy instrument.StoreFailurePolicy) (*idempotency.Store, *redis.Client, *testenv.Proxy, *prometheus.Registry) {
	t.Helper()
	p := testenv.NewProxy(t, testenv.NewRedis(t).Addr())
	c := testenv.NewDeadlineClient(t, p.Addr(), 300*time.Millisecond)
	reg := prometheus.NewPedanticRegistry()
	return newStore(t, c, idempotency.WithRegisterer(reg), idempotency.WithStoreFailure(policy)), c, p, reg
}

// TestStoreFailure_TimeoutDegradesButAnEndedCallerContextDoesNot: a Redis
// that stops answering (blackholed behind the fault proxy) makes the
// client's read time out, and fail open runs fn; a caller whose own
// context ends first gets its error and fn does not run.
func TestStoreFailure_TimeoutDegradesButAnEndedCallerContextDoesNot(t *testing.T) {
	s, c, p, reg := proxiedStore(t, instrument.FailOpen)
	ctx := timeout(t, time.Minute)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	var runs atomic.Int64
	fn := func(context.Context, idempotency.Attempt) ([]byte, error) { runs.Add(1); return []byte("ok"), nil }

	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Do(short, "k1", nil, fn); err == nil || runs.Load() != 0 {
		t.Fatalf("caller's context already ended: %v, fn runs %d; want an error and no run", err, runs.Load())
	}
	res, err := s.Do(ctx, "k2", nil, fn)
	if err != nil || !res.Degraded || runs.Load() != 1 {
		t.Fatalf("read timeout under fail open: %+v, %v, fn runs %d; want fn run, Degraded", res, err, runs.Load())
	}
	if n := degradedCount(t, reg, "idempotency"); n != 1 {
		t.Fatalf("degraded = %v, want 1", n)
	}
}

// TestStoreFailure_ACallerPastItsDeadlineDoesNotRunDegraded: a caller whose
// deadline has passed, before the timer that ends its context fires, gets
// the client's "i/o timeout", which looks like a store that did not answer.
// The store is up and the caller gave up: fail open must not run fn
// without the check.
func TestStoreFailure_ACallerPastItsDeadlineDoesNotRunDegraded(t *testing.T) {
	c := testenv.NewRedis(t).Client(t)
	reg := prometheus.NewPedanticRegistry()
	s := newStore(t, c, idempotency.WithRegisterer(reg), idempotency.WithStoreFailure(instrument.FailOpen))
	var runs atomic.Int64
	fn := func(context.Context, idempotency.Attempt) ([]byte, error) { runs.Add(1); return []byte("ok"), nil }
	ctx := testenv.DeadlinePassed(t, timeout(t, time.Minute), time.Minute)
	if res, err := s.Do(ctx, "k1", nil, fn); err == nil || runs.Load() != 0 {
		t.Fatalf("Do past the caller's deadline: %+v, %v, fn runs %d; want an error and no run", res, err, runs.Load())
	}
	if n := degradedCount(t, reg, "idempotency"); n != 0 {
		t.Fatalf("degraded = %v, want 0", n)
	}
}

// TestStoreFailure_ResultUnstoredAfterTheCallersDeadlineIsStillDegraded:
// the caller's context ends while fn runs (its deadline, or a cancel) and
// Redis stops answering meanwhile, so the result cannot be stored. fn's
// effect happened, and the write ran under a context of its own: fail open
// returns fn's result, Degraded, and counts it, as it does for a caller with
// time left, instead of an error that invites a retry that runs fn again.
// Fail closed returns the error.
func TestStoreFailure_ResultUnstoredAfterTheCallersDeadlineIsStillDegraded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy instrument.StoreFailurePolicy
	}{{"fail-open", instrument.FailOpen}, {"fail-closed", instrument.FailClosed}} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, p, reg := proxiedStore(t, tc.policy)
			// The caller's context ends while fn runs: cancelled from fn,
			// so that no timing decides the order (storefail.Ended reads a
			// cancel as it reads a passed deadline).
			ctx, cancel := context.WithCancel(timeout(t, time.Minute))
			defer cancel()
			var runs atomic.Int64
			fn := func(context.Context, idempotency.Attempt) ([]byte, error) {
				runs.Add(1)
				p.Blackhole(true)
				cancel()
				return []byte("paid"), nil
			}
			res, err := s.Do(ctx, "order-1", nil, fn)
			if runs.Load() != 1 {
				t.Fatalf("fn runs %d, want 1", runs.Load())
			}
			degraded := degradedCount(t, reg, "idempotency")
			if tc.policy == instrument.FailClosed {
				if err == nil || res.Degraded || degraded != 0 {
					t.Fatalf("fail closed, result not stored: %+v, %v, degraded %v; want the store's error", res, err, degraded)
				}
				return
			}
			if err != nil || !res.Degraded || string(res.Body) != "paid" || degraded != 1 {
				t.Fatalf("fail open, result not stored after the caller's deadline: %+v, %v, degraded %v; want fn's result, Degraded, counted once",
					res, err, degraded)
			}
		})
	}
}

// TestStoreFailure_FinishWhoseReplyIsLostIsNotALoss: the script that stores
// fn's result runs, its reply is lost, and go-redis resends it on another
// connection. The resend finds the record already done by this attempt: Do
// must return fn's result, not ErrLeaseLost, and a retry must replay it.
func TestStoreFailure_FinishWhoseReplyIsLostIsNotALoss(t *testing.T) {
	p := testenv.NewProxy(t, testenv.NewRedis(t).Addr())
	c := testenv.NewLostReplyClient(t, p.Addr())
	s := newStore(t, c)
	ctx := timeout(t, time.Minute)
	// Load the scripts: the dropped reply must be finish.lua's, not a
	// NOSCRIPT that go-redis answers with EVAL.
	if _, err := s.Do(ctx, "warm", nil, func(context.Context, idempotency.Attempt) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	var dropped <-chan struct{}
	fn := func(context.Context, idempotency.Attempt) ([]byte, error) {
		runs.Add(1)
		dropped = p.DropNextReply() // the next command is finish.lua
		return []byte("paid"), nil
	}
	res, err := s.Do(ctx, "order-1", nil, fn)
	select {
	case <-dropped:
	default:
		t.Fatal("no reply was dropped: the scenario did not happen")
	}
	if err != nil || string(res.Body) != "paid" || res.Replayed {
		t.Fatalf("Do after the result's reply was lost: %+v, %v; want fn's result", res, err)
	}
	res, err = s.Do(ctx, "order-1", nil, fn)
	if err != nil || string(res.Body) != "paid" || !res.Replayed || runs.Load() != 1 {
		t.Fatalf("retry: %+v, %v, fn runs %d; want the stored result replayed", res, err, runs.Load())
	}
}

// TestStoreFailure_BeginWhoseReplyIsLostRunsAtOnce: begin.lua claims the
// key, its reply is lost, and go-redis resends it. The resend finds the key
// claimed by this same attempt: it must run fn now, once, not wait out its
// own lease as if another owner held the key.
func TestStoreFailure_BeginWhoseReplyIsLostRunsAtOnce(t *testing.T) {
	p := testenv.NewProxy(t, testenv.NewRedis(t).Addr())
	c := testenv.NewLostReplyClient(t, p.Addr())
	s := newStore(t, c, idempotency.WithLease(time.Minute))
	ctx := timeout(t, time.Minute)
	if _, err := s.Do(ctx, "warm", nil, func(context.Context, idempotency.Attempt) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	dropped := p.DropNextReply() // the next command is begin.lua
	// Far less than the lease: a Do that waits for its own claim fails.
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := s.Do(dctx, "order-1", nil, func(_ context.Context, a idempotency.Attempt) ([]byte, error) {
		runs.Add(1)
		if a.N != 1 {
			t.Errorf("attempt %d, want 1: the resend claimed the key again", a.N)
		}
		return []byte("paid"), nil
	})
	select {
	case <-dropped:
	default:
		t.Fatal("no reply was dropped: the scenario did not happen")
	}
	if err != nil || string(res.Body) != "paid" || runs.Load() != 1 {
		t.Fatalf("Do after begin's reply was lost: %+v, %v, fn runs %d; want one run", res, err, runs.Load())
	}
}
