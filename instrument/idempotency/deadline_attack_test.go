package idempotency_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestDeadlineAttack_BlackholedRedisRunsDegradedOnlyForCallersWithTimeLeft:
// Redis stops answering (a blackhole through a proxy) while many callers run
// Do at once under FailOpen, each with its own deadline. The client takes
// its socket deadline from the caller's context (ContextTimeoutEnabled), so
// a caller whose deadline comes no later than the read timeout can only fail
// on its own deadline: it must get an error and fn must not run. A caller
// with seconds left must run fn without the check (Degraded). Callers just
// past the read timeout may go either way. The degraded counter counts
// exactly the degraded runs.
//
// Not parallel: its margins are the 300ms read timeout against the callers'
// deadlines; it runs before the package's parallel tests, not among them.
func TestDeadlineAttack_BlackholedRedisRunsDegradedOnlyForCallersWithTimeLeft(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	c := testenv.NewDeadlineClient(t, p.Addr(), readTimeout)
	reg := prometheus.NewPedanticRegistry()
	s := newStore(t, c, idempotency.WithRegisterer(reg), idempotency.WithStoreFailure(instrument.FailOpen))
	const n = 60
	ctx := timeout(t, 30*time.Second)
	// The scripts are loaded and the pool holds enough connections.
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := s.Do(ctx, fmt.Sprintf("warm-%d", i), nil, func(context.Context, idempotency.Attempt) ([]byte, error) { return []byte("ok"), nil }); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Counted from here: on a loaded machine a warm-up call can outlast the
	// 300ms read timeout and run degraded too, which is not what this test
	// counts.
	before := degradedCount(t, reg, "idempotency")

	p.Blackhole(true)
	budgets := testenv.DeadlineBudgets(n, readTimeout)
	results := make([]idempotency.Result, n)
	errs := make([]error, n)
	runs := make([]atomic.Int64, n)
	for i := range n {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(context.Background(), budgets[i])
			defer cancel()
			results[i], errs[i] = s.Do(cctx, fmt.Sprintf("order-%d", i), nil, func(_ context.Context, a idempotency.Attempt) ([]byte, error) {
				runs[i].Add(1)
				return []byte("done"), nil
			})
		})
	}
	wg.Wait()

	degraded := 0
	for i := range n {
		ran := runs[i].Load()
		res, err := results[i], errs[i]
		if res.Degraded {
			degraded++
		}
		switch {
		case ran > 1:
			t.Errorf("caller %d: fn ran %d times", i, ran)
		case ran == 1 && (!res.Degraded || err != nil || string(res.Body) != "done"):
			t.Errorf("caller %d: fn ran with Redis blackholed but Do returned %+v, %v; want a degraded result", i, res, err)
		case budgets[i] <= readTimeout && (ran != 0 || res.Degraded || err == nil):
			t.Errorf("caller %d (deadline %s, read timeout %s): fn runs %d, %+v, %v; the caller's deadline was taken for a store failure", i, budgets[i], readTimeout, ran, res, err)
		case budgets[i] == testenv.TimeLeft && ran != 1:
			t.Errorf("caller %d (deadline %s): fn runs %d, %+v, %v; want a degraded run", i, budgets[i], ran, res, err)
		}
	}
	if got := degradedCount(t, reg, "idempotency") - before; got != float64(degraded) {
		t.Fatalf("degraded = %v, want %d (one per degraded run)", got, degraded)
	}
}
