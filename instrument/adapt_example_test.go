package instrument_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
)

// RedisLock is the lock many services already have, as the spec shows it:
// SET NX PX to take it, a Lua compare-and-delete to give it back.
type RedisLock struct {
	client *redis.Client
	key    string
	value  string
	ttl    time.Duration
}

var unlockScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0`)

func NewRedisLock(client *redis.Client, key string, ttl time.Duration) *RedisLock {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return &RedisLock{client: client, key: key, value: hex.EncodeToString(b), ttl: ttl}
}

func (l *RedisLock) Lock(ctx context.Context) (bool, error) {
	return l.client.SetNX(ctx, l.key, l.value, l.ttl).Result()
}

func (l *RedisLock) Unlock(ctx context.Context) error {
	return unlockScript.Run(ctx, l.client, []string{l.key}, l.value).Err()
}

// ExampleFromFunc wraps the hand-written RedisLock, so that its callers get
// lockgov's policy, spans, metrics and fallback release without a rewrite.
func ExampleFromFunc() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	const ttl = 30 * time.Second
	locker := instrument.Govern(instrument.FromFunc(
		func(ctx context.Context, key string) (func(context.Context) error, error) {
			l := NewRedisLock(rdb, key, ttl)
			ok, err := l.Lock(ctx)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, instrument.ErrNotAcquired // held by someone else
			}
			return l.Unlock, nil
		},
		instrument.FuncTTL(ttl), // the lease context ends when the Redis key may expire
	))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := instrument.Do(ctx, locker, "lock:quota:42", func(ctx context.Context) error {
		fmt.Println("deducting quota while holding the lock")
		return nil
	}, instrument.Retry(instrument.ExponentialBackoff(10*time.Millisecond, 200*time.Millisecond), 10))
	if errors.Is(err, instrument.ErrNotAcquired) {
		fmt.Println("busy, try later")
	}
}
