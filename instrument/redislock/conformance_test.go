package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/locktest"
)

func TestConformance_SingleNode(t *testing.T) {
	r, admin := setup(t)
	locktest.Run(t,
		func(t *testing.T) instrument.Locker {
			return newLocker(t, newClient(t, r.Addr()))
		},
		locktest.WithExpiryTTL(300*time.Millisecond),
		locktest.WithLoser(func(t *testing.T, key string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := admin.Del(ctx, key).Err(); err != nil {
				t.Fatalf("delete lock key: %v", err)
			}
		}),
	)
}
