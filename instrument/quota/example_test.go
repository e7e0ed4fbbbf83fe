package quota_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// exampleRedis starts a private redis-server for an Example.
func exampleRedis() (*redis.Client, func()) {
	r, err := testenv.StartRedis()
	if err != nil {
		panic(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	return c, func() { _ = c.Close(); _ = r.Close() }
}

func ExampleNew() {
	rdb, stop := exampleRedis()
	defer stop()
	reg := prometheus.NewRegistry()
	q, err := quota.New(rdb, quota.WithShards(8), quota.WithRegisterer(reg))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_ = q.Set(ctx, "stock:sku-1", 100)
	left, _ := q.Remaining(ctx, "stock:sku-1")
	fmt.Println(left)
	// Output: 100
}

func ExampleQuota_Deduct() {
	rdb, stop := exampleRedis()
	defer stop()
	q, _ := quota.New(rdb)
	ctx := context.Background()
	_ = q.Set(ctx, "stock:sku-1", 3)

	left, err := q.Deduct(ctx, "stock:sku-1", 2, "order-17")
	fmt.Println(left, err)
	// The client retries order-17: nothing more is deducted.
	left, err = q.Deduct(ctx, "stock:sku-1", 2, "order-17")
	fmt.Println(left, err)
	_, err = q.Deduct(ctx, "stock:sku-1", 2, "order-18")
	fmt.Println(errors.Is(err, quota.ErrInsufficient))
	// Output:
	// 1 <nil>
	// 1 <nil>
	// true
}

func ExampleQuota_Refund() {
	rdb, stop := exampleRedis()
	defer stop()
	q, _ := quota.New(rdb)
	ctx := context.Background()
	_ = q.Set(ctx, "stock:sku-1", 3)
	_, _ = q.Deduct(ctx, "stock:sku-1", 2, "order-17")
	// Order 17 is cancelled; the refund has its own request id and is
	// applied once however often it is retried.
	_, _ = q.Refund(ctx, "stock:sku-1", 2, "cancel-order-17")
	left, _ := q.Refund(ctx, "stock:sku-1", 2, "cancel-order-17")
	fmt.Println(left)
	// Output: 3
}

func ExampleQuota_Add() {
	rdb, stop := exampleRedis()
	defer stop()
	q, _ := quota.New(rdb)
	ctx := context.Background()
	_ = q.Set(ctx, "api:tenant-a", 10)
	_ = q.Add(ctx, "api:tenant-a", 5)
	left, _ := q.Remaining(ctx, "api:tenant-a")
	fmt.Println(left)
	// Output: 15
}

func ExampleQuota_Rebalance() {
	rdb, stop := exampleRedis()
	defer stop()
	q, _ := quota.New(rdb, quota.WithShards(2))
	ctx := context.Background()
	_ = q.Set(ctx, "stock:hot", 4) // 2 per shard
	_, _ = q.Deduct(ctx, "stock:hot", 2, "a")
	// One shard is empty and the other holds 2: deductions that start at
	// the empty one fall back every time. Rebalance gives each shard 1.
	_ = q.Rebalance(ctx, "stock:hot")
	left, _ := q.Remaining(ctx, "stock:hot")
	fmt.Println(left)
	// Output: 2
}

// A per-process allowance decides deductions while Redis is down; what it
// approved is reconciled against the ledger afterwards.
func ExampleWithFallback() {
	srv, err := testenv.StartRedis()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	var allowance atomic.Int64
	allowance.Store(1) // units this process may sell without Redis
	q, err := quota.New(rdb, quota.WithLogger(slog.New(slog.DiscardHandler)),
		quota.WithFallback(func(ctx context.Context, key string, amount int64, requestID string) (int64, error) {
			if allowance.Add(-amount) < 0 {
				return 0, quota.ErrInsufficient
			}
			return allowance.Load(), nil
		}))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_ = q.Set(ctx, "stock:sku-1", 10)
	_ = srv.Kill() // Redis goes down

	_, err = q.Deduct(ctx, "stock:sku-1", 1, "order-1")
	fmt.Println(err)
	_, err = q.Deduct(ctx, "stock:sku-1", 1, "order-2")
	fmt.Println(errors.Is(err, quota.ErrInsufficient))
	// Output:
	// <nil>
	// true
}

// Deductions that survive a failover to a replica: each returns only once
// one replica has it. One that too few replicas acknowledged ran on the
// primary: retry it with its request id, which applies it at most once.
// (Not run: it needs a Sentinel deployment.)
func ExampleWithReplicaAcks() {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "stock",
		SentinelAddrs: []string{"sentinel-0:26379", "sentinel-1:26379", "sentinel-2:26379"},
		ReadTimeout:   3 * time.Second, // at least the ack timeout + 250ms
	})
	defer rdb.Close()
	q, err := quota.New(rdb, quota.WithReplicaAcks(1, time.Second))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	left, err := q.Deduct(ctx, "stock:sku-1", 1, "order-1")
	var nr *quota.NotReplicatedError
	switch {
	case errors.As(err, &nr):
		fmt.Printf("on %d of %d replicas: retry order-1\n", nr.Acked, nr.Wanted)
	case errors.Is(err, quota.ErrInsufficient):
		fmt.Println("sold out")
	case err != nil:
		fmt.Println("store error:", err)
	default:
		fmt.Println(left, "left, on a replica too")
	}
}
