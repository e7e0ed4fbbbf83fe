package quota_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestDeadlineAttack_BlackholedRedisReachesTheFallbackOnlyForCallersWithTimeLeft:
// Redis stops answering (a blackhole through a proxy) while many callers
// deduct at once, each with its own deadline. The client takes its socket
// deadline from the caller's context (ContextTimeoutEnabled), so a caller
// whose deadline comes no later than the read timeout can only fail on its
// own deadline: it must get an error and the fallback must not decide for
// it. A caller with seconds left must get the fallback's answer. Callers
// just past the read timeout may go either way. The degraded counter counts
// exactly the fallback's decisions.
func TestDeadlineAttack_BlackholedRedisReachesTheFallbackOnlyForCallersWithTimeLeft(t *testing.T) {
	t.Parallel()
	const readTimeout = 300 * time.Millisecond
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	c := testenv.NewDeadlineClient(t, p.Addr(), readTimeout)
	reg := prometheus.NewPedanticRegistry()
	const n = 60
	var mu sync.Mutex
	decided := map[string]int{} // key -> fallback calls
	q := newQuota(t, c, quota.WithRegisterer(reg), quota.WithPolicy(skuPolicy(t)),
		quota.WithFallback(func(_ context.Context, key string, _ int64, _ string) (int64, error) {
			mu.Lock()
			defer mu.Unlock()
			decided[key]++
			return 7, nil
		}))
	ctx := timeout(t, 30*time.Second)
	for i := range n {
		if err := q.Set(ctx, fmt.Sprintf("stock:sku-%d", i), 10); err != nil {
			t.Fatal(err)
		}
	}
	// The script is loaded and the pool holds enough connections.
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := q.Deduct(ctx, fmt.Sprintf("stock:sku-%d", i), 1, "warm"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Counted from here: on a loaded machine a warm-up call can outlast the
	// 300ms read timeout and reach the fallback too, which is not what this
	// test counts.
	mu.Lock()
	clear(decided)
	mu.Unlock()
	before := degradedCount(t, reg)

	p.Blackhole(true)
	budgets := testenv.DeadlineBudgets(n, readTimeout)
	rems := make([]int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(context.Background(), budgets[i])
			defer cancel()
			rems[i], errs[i] = q.Deduct(cctx, fmt.Sprintf("stock:sku-%d", i), 1, "order")
		})
	}
	wg.Wait()

	total := 0
	for i := range n {
		key := fmt.Sprintf("stock:sku-%d", i)
		calls := decided[key]
		total += calls
		switch {
		case calls > 1:
			t.Errorf("%s: fallback called %d times for one deduction", key, calls)
		case budgets[i] <= readTimeout && (calls != 0 || errs[i] == nil):
			t.Errorf("%s (deadline %s, read timeout %s): fallback calls %d, err %v; the caller's deadline was taken for a store failure", key, budgets[i], readTimeout, calls, errs[i])
		case budgets[i] == testenv.TimeLeft && (calls != 1 || errs[i] != nil || rems[i] != 7):
			t.Errorf("%s (deadline %s): fallback calls %d, %d, %v; want the fallback's answer", key, budgets[i], calls, rems[i], errs[i])
		case calls == 1 && (errs[i] != nil || rems[i] != 7):
			t.Errorf("%s: the fallback decided but Deduct returned %d, %v", key, rems[i], errs[i])
		}
	}
	if got := degradedCount(t, reg) - before; got != float64(total) {
		t.Fatalf("degraded = %v, want %d (one per fallback decision)", got, total)
	}
}
