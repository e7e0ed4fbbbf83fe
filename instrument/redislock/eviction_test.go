package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestEviction_HolderLearnsAtItsNextRenewalAndTheNextFenceIsHigher: a Redis
// with maxmemory and an eviction policy (ElastiCache's default volatile-lru
// takes any key with a TTL, and every lock key has one) deletes a held lock.
// Nothing can stop a second Acquire from taking the key then, while the
// holder still believes it holds it: mutual exclusion is gone until the
// holder's next renewal. What lockgov must keep: that renewal ends the
// holder's lease with ErrLockLost, and the second holder's fence is above the
// first's, so a fenced write of the first is refused.
func TestEviction_HolderLearnsAtItsNextRenewalAndTheNextFenceIsHigher(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"volatile-lru", "volatile-ttl", "allkeys-lru", "allkeys-random"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			_, c := setup(t)
			la, lb := newLocker(t, c), newLocker(t, c)
			ctx := timeout(t, 30*time.Second)
			const key = "lock:payout:42"

			a, err := la.Acquire(ctx, key, instrument.WithTTL(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Release(context.Background())
			testenv.Evict(t, c, policy, key)

			b, err := lb.Acquire(ctx, key, instrument.WithTTL(time.Minute), instrument.FailFast())
			if err != nil {
				t.Fatalf("second Acquire after the lock was evicted: %v", err)
			}
			defer b.Release(context.Background())
			if b.Fence() <= a.Fence() {
				t.Errorf("fence after eviction %d <= evicted holder's %d: a stale fenced write would be accepted", b.Fence(), a.Fence())
			}
			// The watchdog renews at TTL/3: the renewal after the eviction
			// finds B's token and ends A's lease.
			select {
			case <-a.Context().Done():
			case <-ctx.Done():
				t.Fatal("the evicted holder's lease never ended")
			}
			if cause := context.Cause(a.Context()); !errors.Is(cause, instrument.ErrLockLost) {
				t.Fatalf("evicted holder's cause = %v, want ErrLockLost", cause)
			}
			if err := a.Release(ctx); !errors.Is(err, instrument.ErrNotHeld) && !errors.Is(err, instrument.ErrLockLost) {
				t.Errorf("evicted holder's Release = %v, want ErrNotHeld or ErrLockLost", err)
			}
			if b.Context().Err() != nil {
				t.Fatalf("second holder's lease ended: %v", context.Cause(b.Context()))
			}
		})
	}
}
