package quota_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/leakcheck"
	"github.com/lockgov/lockgov/internal/testenv"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

func newQuota(t testing.TB, c redis.UniversalClient, opts ...quota.Option) *quota.Quota {
	t.Helper()
	q, err := quota.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func timeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// single starts a private redis-server and returns a client to it.
func single(t testing.TB) *redis.Client {
	t.Helper()
	return testenv.NewRedis(t).Client(t)
}
