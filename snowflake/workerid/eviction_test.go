package workerid_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// TestEviction_TwoHoldersNeverIssueTheSameID: a Redis with maxmemory and an
// eviction policy evicts A's slot while A's lease is valid on A's side (every
// slot key has a TTL: a candidate under volatile-* and allkeys-*). B claims
// the empty slot at once; A keeps issuing until its renewal finds B's claim.
// No ID may be issued by both, whether the high-water mark went with the slot
// (B's floor is then the server's now + TTL, as after a restart) or stayed
// (volatile-ttl evicts the slot, whose TTL is shorter, first: B's floor is then
// A's reservation).
func TestEviction_TwoHoldersNeverIssueTheSameID(t *testing.T) {
	t.Parallel()
	slot := workerid.SlotKey(workerid.DefaultKeyPrefix, 6)
	t.Run("slot and mark evicted", func(t *testing.T) {
		t.Parallel()
		twoHoldersAcrossALoss(t, func(t *testing.T, _ *testenv.Redis, cc *redis.Client) {
			testenv.Evict(t, cc, "volatile-lru", slot, slot+":hw", slot+":space")
		})
	})
	t.Run("slot evicted, mark kept", func(t *testing.T) {
		t.Parallel()
		twoHoldersAcrossALoss(t, func(t *testing.T, _ *testenv.Redis, cc *redis.Client) {
			// Which of a slot's keys an eviction takes is Redis's choice; keep
			// the mark out of it (a key without a TTL is no volatile-*
			// candidate) so that this case is the one tested, then give it its
			// TTL back.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pttl, err := cc.PTTL(ctx, slot+":hw").Result()
			if err != nil || pttl <= 0 {
				t.Fatalf("mark's PTTL = %v, %v", pttl, err)
			}
			if err := cc.Persist(ctx, slot+":hw").Err(); err != nil {
				t.Fatal(err)
			}
			testenv.Evict(t, cc, "volatile-ttl", slot)
			if err := cc.PExpire(ctx, slot+":hw", pttl).Err(); err != nil {
				t.Fatal(err)
			}
		})
	})
}
