package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
)

func ExampleDo() {
	srv, err := testenv.StartRedis() // a service uses its own Redis
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()

	raw, err := redislock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer raw.Close()
	registry := prometheus.NewRegistry()
	locker := instrument.Govern(raw, instrument.WithRegisterer(registry))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // rule 1: a timeout
	defer cancel()
	err = instrument.Do(ctx, locker, "lock:quota:42", func(ctx context.Context) error {
		// Runs under the lock; ctx ends with ErrLockLost if the lock is lost.
		return nil
	})
	fmt.Println(err)

	// Without a deadline the default policy (enforce) refuses the call.
	err = instrument.Do(context.Background(), locker, "lock:quota:42", func(context.Context) error { return nil })
	fmt.Println(errors.Is(err, instrument.ErrPolicy))
	// Output:
	// <nil>
	// true
}

func ExampleGovern() {
	srv, err := testenv.StartRedis()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	raw, err := redislock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer raw.Close()
	pol, err := policy.Parse("lockgov.yaml", []byte(`
version: 1
patterns:
  - pattern: "lock:quota:{merchant_id}"
    ttl: 10s
    max_ttl: 1m
`))
	if err != nil {
		panic(err)
	}
	locker := instrument.Govern(raw, instrument.WithPolicy(pol))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = locker.Acquire(ctx, "lock:quota:42", instrument.WithTTL(5*time.Minute))
	fmt.Println(err)
	// Output: instrument: acquire (pattern lock:quota:{merchant_id}): lockgov: policy violation: ttl rule: TTL 5m0s is outside the policy bounds [10ms, 1m0s]
}

// With its Redis down, a fail-open Governed grants a process-local lock
// (fence 0) instead of returning the transport error.
func ExampleWithStoreFailure() {
	srv, err := testenv.StartRedis()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	raw, err := redislock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer raw.Close()
	locker := instrument.Govern(raw, instrument.WithStoreFailure(instrument.FailOpen),
		instrument.WithLogger(slog.New(slog.DiscardHandler)), instrument.WithoutHeartbeat())
	_ = srv.Kill() // Redis goes down

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := locker.Acquire(ctx, "lock:order:1")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println("held locally, fence", lease.Fence())
	// Output: held locally, fence 0
}
