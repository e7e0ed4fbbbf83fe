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

func degradedCount(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "lockgov_store_degraded_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "quota" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatal(`no lockgov_store_degraded_total{component="quota"}`)
	return 0
}

// TestStoreFailure_RedisKilled: with Redis killed, Deduct without a
// fallback returns the transport error; with WithFallback the fallback
// decides and lockgov_store_degraded_total{component="quota"} counts each
// call. A store answer (ErrInsufficient) never reaches the fallback. When
// Redis returns (its data kept on disk), a request id deducted before the
// outage replays its first answer and is not deducted again.
func TestStoreFailure_RedisKilled(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t, testenv.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	c := r.Client(t)
	reg := prometheus.NewPedanticRegistry()
	var fallbacks atomic.Int64
	allowance := func(_ context.Context, _ string, amount int64, _ string) (int64, error) {
		if fallbacks.Add(1) > 2 {
			return 0, quota.ErrInsufficient
		}
		return 0, nil
	}
	for _, shards := range []int{1, 8} {
		closed := newQuota(t, c, quota.WithShards(shards), quota.WithRegisterer(reg), quota.WithPolicy(skuPolicy(t)))
		open := newQuota(t, c, quota.WithShards(shards), quota.WithRegisterer(reg), quota.WithPolicy(skuPolicy(t)), quota.WithFallback(allowance))
		ctx := timeout(t, 2*time.Minute)
		key := "stock:sku-" + string(rune('0'+shards))
		stock := int64(10 * shards) // every shard holds 10
		if err := closed.Set(ctx, key, stock); err != nil {
			t.Fatal(err)
		}
		if rem, err := open.Deduct(ctx, key, 3, "order-1"); err != nil {
			t.Fatalf("before the outage: %d, %v", rem, err)
		}
		fallbacks.Store(0)
		d0 := degradedCount(t, reg)
		if _, err := open.Deduct(ctx, key, 100*stock, "order-big"); !errors.Is(err, quota.ErrInsufficient) || fallbacks.Load() != 0 {
			t.Fatalf("insufficient with Redis up: %v, fallback calls %d; want ErrInsufficient from the store", err, fallbacks.Load())
		}

		if err := r.Kill(); err != nil {
			t.Fatal(err)
		}
		_, err := closed.Deduct(ctx, key, 1, "order-2")
		if err == nil || errors.Is(err, quota.ErrInsufficient) {
			t.Fatalf("fail closed with Redis down: %v, want the transport error", err)
		}
		if _, err := open.Deduct(ctx, key, 1, "order-2"); err != nil {
			t.Fatalf("fallback with Redis down: %v, want its approval", err)
		}
		if _, err := open.Deduct(ctx, key, 1, "order-3"); err != nil {
			t.Fatalf("fallback with Redis down: %v, want its approval", err)
		}
		if _, err := open.Deduct(ctx, key, 1, "order-4"); !errors.Is(err, quota.ErrInsufficient) {
			t.Fatalf("fallback past its allowance: %v, want its ErrInsufficient", err)
		}
		if got := degradedCount(t, reg) - d0; got != 3 || fallbacks.Load() != 3 {
			t.Fatalf("degraded +%v, fallback calls %d; want 3 and 3", got, fallbacks.Load())
		}
		if _, err := open.Refund(ctx, key, 1, "refund-1"); err == nil {
			t.Fatal("Refund with Redis down succeeded; it fails closed")
		}

		restartRedis(t, ctx, r, c)
		rem, err := open.Deduct(ctx, key, 3, "order-1")
		if err != nil || (shards == 1 && rem != stock-3) {
			t.Fatalf("retry of order-1 after Redis returned: %d, %v; want its first answer", rem, err)
		}
		if total, err := open.Remaining(ctx, key); err != nil || total != stock-3 {
			t.Fatalf("Remaining after Redis returned = %d, %v; want %d (order-1 deducted once)", total, err, stock-3)
		}
		if got := degradedCount(t, reg) - d0; got != 3 {
			t.Fatalf("degraded +%v after Redis returned, want still 3", got)
		}
		if got := counter(t, reg, "degraded"); got == 0 {
			t.Fatal(`lockgov_quota_deduct_total{result="degraded"} not counted`)
		}
	}
}

// restartRedis brings r back and waits until c answers again.
func restartRedis(t *testing.T, ctx context.Context, r *testenv.Redis, c redis.UniversalClient) {
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

// TestStoreFailure_ACallerPastItsDeadlineDoesNotReachTheFallback: a caller
// whose deadline has passed, before the timer that ends its context fires,
// gets the client's "i/o timeout", which looks like a store that did not
// answer. The store is up and the caller gave up: the fallback must not
// decide.
func TestStoreFailure_ACallerPastItsDeadlineDoesNotReachTheFallback(t *testing.T) {
	t.Parallel()
	c := single(t)
	reg := prometheus.NewPedanticRegistry()
	var fallbacks atomic.Int64
	q := newQuota(t, c, quota.WithRegisterer(reg), quota.WithPolicy(skuPolicy(t)),
		quota.WithFallback(func(context.Context, string, int64, string) (int64, error) { fallbacks.Add(1); return 0, nil }))
	ctx := timeout(t, time.Minute)
	if err := q.Set(ctx, "stock:sku-1", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Deduct(testenv.DeadlinePassed(t, ctx, time.Minute), "stock:sku-1", 1, "order-1"); err == nil || fallbacks.Load() != 0 {
		t.Fatalf("deduct past the caller's deadline: %v, fallback calls %d; want an error and none", err, fallbacks.Load())
	}
	if n := degradedCount(t, reg); n != 0 {
		t.Fatalf("degraded = %v, want 0", n)
	}
}
