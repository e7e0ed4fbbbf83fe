package policykeys

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// With the policy, "quota:{merchant_id}" is a lock key though it has no
// lock word.
func releaseQuota(ctx context.Context, rdb redis.Cmdable, merchantID string) {
	rdb.Del(ctx, "quota:"+merchantID) // want `DEL on lock key "quota:" \+ merchantID`
}

func releaseStock(ctx context.Context, rdb redis.Cmdable, sku string, shard int) {
	rdb.Del(ctx, "stock:"+sku+":"+string(rune('0'+shard))) // want `DEL on lock key`
}

// A name still marks a key with no constant prefix.
func releaseByName(ctx context.Context, rdb redis.Cmdable, lockKey string) {
	rdb.Del(ctx, lockKey) // want `DEL on lock key lockKey`
}

// Negative: the policy declares no lock:cache pattern, so this is not a
// lock key in policy mode.
func evict(ctx context.Context, rdb redis.Cmdable, id string) {
	rdb.Del(ctx, "lock:cache:"+id)
}
