package unsafeunlock

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Tests delete locks on purpose (to simulate a lost lock): test files are
// skipped unless -tests.
func TestLostLock(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{})
	rdb.Del(context.Background(), "lock:order:1")
}
