package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
)

// Example_governedRedsync wraps a redsync Mutex with instrument.FromFunc.
func Example_governedRedsync() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locker := governedRedsync(redsync.New(goredis.NewPool(rdb)))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := locker.Acquire(ctx, "lock:order:1001", instrument.FailFast())
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println("holding", lease.Key())
}
