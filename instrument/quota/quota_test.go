package quota_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
)

// noOversell runs 64 goroutines making 20,000 attempts to deduct 1 from a
// stock of 10,000, every 4th attempt retried with its request id, while a
// reader samples Remaining. Exactly 10,000 distinct requests succeed, the
// retries deduct nothing more and answer as the first call did, Remaining
// ends at 0 and never reads negative.
func noOversell(t *testing.T, c redis.UniversalClient, opts ...quota.Option) {
	const stock, attempts, workers = 10_000, 20_000, 64
	reg := prometheus.NewPedanticRegistry()
	q := newQuota(t, c, append(opts, quota.WithRegisterer(reg), quota.WithPolicy(skuPolicy(t)))...)
	ctx := timeout(t, 5*time.Minute)
	const key = "stock:sku-1"
	if err := q.Set(ctx, key, stock); err != nil {
		t.Fatal(err)
	}

	var (
		succeeded, short, retryMismatch atomic.Int64
		next                            atomic.Int64
		wg                              sync.WaitGroup
		errs                            = make(chan error, workers)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= attempts {
					return
				}
				id := fmt.Sprintf("req-%d", i)
				rem, err := q.Deduct(ctx, key, 1, id)
				switch {
				case err == nil:
					succeeded.Add(1)
					if rem < 0 {
						errs <- fmt.Errorf("Deduct returned remaining %d", rem)
						return
					}
				case errors.Is(err, quota.ErrInsufficient):
					short.Add(1)
				default:
					errs <- err
					return
				}
				if i%4 == 0 {
					rem2, err2 := q.Deduct(ctx, key, 1, id)
					if rem2 != rem || (err == nil) != (err2 == nil) {
						retryMismatch.Add(1)
					}
				}
			}
		}()
	}

	done := make(chan struct{})
	sampled := make(chan error, 1)
	go func() {
		var bad error
		for {
			select {
			case <-done:
				sampled <- bad
				return
			default:
			}
			r, err := q.Remaining(ctx, key)
			if err != nil && bad == nil {
				bad = err
			}
			if r < 0 && bad == nil {
				bad = fmt.Errorf("Remaining read %d", r)
			}
		}
	}()
	wg.Wait()
	close(done)
	if err := <-sampled; err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	if got := succeeded.Load(); got != stock {
		t.Fatalf("%d deductions succeeded, want exactly %d", got, stock)
	}
	if got := short.Load(); got != attempts-stock {
		t.Fatalf("%d deductions were short, want %d", got, attempts-stock)
	}
	if n := retryMismatch.Load(); n != 0 {
		t.Fatalf("%d retries answered differently from their first call", n)
	}
	if r, err := q.Remaining(ctx, key); err != nil || r != 0 {
		t.Fatalf("Remaining = %d, %v; want 0", r, err)
	}
	if got := counter(t, reg, "ok"); got != stock {
		t.Fatalf(`lockgov_quota_deduct_total{result="ok"} = %v, want %d`, got, stock)
	}
	if got := counter(t, reg, "replay") + counter(t, reg, "replay_insufficient"); got != attempts/4 {
		t.Fatalf("lockgov_quota_deduct_total replays = %v, want %d", got, attempts/4)
	}
}

// skuPolicy declares the pattern stock:{sku}, the label of every stock key.
func skuPolicy(t testing.TB) *policy.Policy {
	t.Helper()
	p := policy.Default()
	r := p.Defaults
	r.Pattern = "stock:{sku}"
	p.Patterns = append(p.Patterns, r)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// counter returns lockgov_quota_deduct_total{key_pattern="stock:{sku}",
// result} as gathered from reg; any other key_pattern fails the test (the
// label is the declared pattern, never the raw key).
func counter(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lockgov_quota_deduct_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var pattern, res string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "key_pattern":
					pattern = l.GetValue()
				case "result":
					res = l.GetValue()
				}
			}
			if pattern != "stock:{sku}" {
				t.Fatalf("lockgov_quota_deduct_total has key_pattern %q, want the declared stock:{sku}", pattern)
			}
			if res == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no lockgov_quota_deduct_total{result=%q}", result)
	return 0
}

func TestDeduct_NeverOversells(t *testing.T) {
	t.Parallel()
	noOversell(t, single(t))
}

func TestDeduct_NeverOversells_EightShards(t *testing.T) {
	t.Parallel()
	noOversell(t, single(t), quota.WithShards(8))
}

func TestDeduct_NeverOversells_Cluster(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	noOversell(t, cl.Client(t), quota.WithShards(8))
}
