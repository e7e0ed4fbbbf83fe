package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/leakcheck"
	"github.com/lockgov/lockgov/internal/testenv"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
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
	return testenv.NewRedis(t).Client(t)
}
