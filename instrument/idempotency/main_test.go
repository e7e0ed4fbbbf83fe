package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		MaxRetries:            1,
		PoolSize:              64,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newStore(t testing.TB, c redis.UniversalClient, opts ...idempotency.Option) *idempotency.Store {
	t.Helper()
	s, err := idempotency.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func timeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func single(t testing.TB) *redis.Client {
	t.Helper()
	return newClient(t, testenv.NewRedis(t).Addr())
}
