// Command redsync shows existing redsync code governed by lockgov: the
// redsync Mutex keeps doing the locking, instrument.FromFunc and
// instrument.Govern add the timeout rule, the fallback release, spans and
// metrics. It lives in its own module so that redsync never enters
// lockgov's dependencies.
//
//	REDIS_ADDR=127.0.0.1:6379 go run .
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
)

// ttl is the expiry redsync sets on its key.
const ttl = 8 * time.Second

// governedRedsync adapts redsync Mutexes, one per key, to instrument.Locker.
// A Mutex that is taken maps to instrument.ErrNotAcquired, so that Retry and
// the acquire metrics treat it as contention; redsync's own retries are
// switched off (WithTries(1)) so lockgov's wait strategy is the only one.
func governedRedsync(rs *redsync.Redsync) instrument.Locker {
	return instrument.Govern(instrument.FromFunc(
		func(ctx context.Context, key string) (func(context.Context) error, error) {
			m := rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
			if err := m.LockContext(ctx); err != nil {
				var taken *redsync.ErrTaken
				if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
					return nil, fmt.Errorf("%w: %w", instrument.ErrNotAcquired, err)
				}
				return nil, err
			}
			return func(ctx context.Context) error {
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					return instrument.ErrNotHeld
				}
				return err
			}, nil
		},
		instrument.FuncTTL(ttl),
	))
}

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locker := governedRedsync(redsync.New(goredis.NewPool(rdb)))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := instrument.Do(ctx, locker, "lock:order:1001", func(ctx context.Context) error {
		fmt.Println("holding lock:order:1001 through redsync, governed by lockgov")
		return nil
	}, instrument.Retry(instrument.ExponentialBackoff(10*time.Millisecond, 200*time.Millisecond), 20))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
}
