package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// exampleRedis starts a private redis-server for the examples; a service
// uses its own address.
func exampleRedis() (*testenv.Redis, *redis.Client) {
	srv, err := testenv.StartRedis()
	if err != nil {
		panic(err)
	}
	return srv, redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
}

func ExampleNew() {
	srv, rdb := exampleRedis()
	defer srv.Close()
	defer rdb.Close()

	locker, err := redislock.New(rdb, redislock.WithService("billing"))
	if err != nil {
		panic(err)
	}
	defer locker.Close() // closes its pub/sub connection, kept open between waits
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()

	lease, err := locker.Acquire(ctx, "lock:quota:42", instrument.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	// Someone else fails fast while the lease is held.
	_, err = locker.Acquire(ctx, "lock:quota:42", instrument.FailFast())
	fmt.Println("second acquire:", errors.Is(err, instrument.ErrNotAcquired))

	fmt.Println("release:", lease.Release(ctx))
	fmt.Println("lease context:", context.Cause(lease.Context()))
	// Output:
	// second acquire: true
	// release: <nil>
	// lease context: lockgov: lock released
}

func ExampleFair() {
	srv, rdb := exampleRedis()
	defer srv.Close()
	defer rdb.Close()

	locker, err := redislock.New(rdb, redislock.Fair())
	if err != nil {
		panic(err)
	}
	defer locker.Close() // closes its pub/sub connection, kept open between waits
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = instrument.Do(ctx, locker, "lock:stock:sku-1", func(ctx context.Context) error {
		return nil // waiters behind this holder get the lock in the order they asked
	})
	fmt.Println(err)
	// Output: <nil>
}

func ExampleNewQuorum() {
	var nodes []redis.UniversalClient
	for range 3 {
		srv, rdb := exampleRedis()
		defer srv.Close()
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	locker, err := redislock.NewQuorum(nodes)
	if err != nil {
		panic(err)
	}
	defer locker.Close() // closes its pub/sub connection, kept open between waits
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	lease, err := locker.Acquire(ctx, "lock:report:daily")
	if err != nil {
		panic(err)
	}
	fmt.Println("held by a majority:", lease.Context().Err() == nil)
	fmt.Println(lease.Release(ctx))
	// Output:
	// held by a majority: true
	// <nil>
}
