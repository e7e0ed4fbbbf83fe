package policyglobal

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// A constant key the policy matches with a placeholder pattern... that is
// a global lock all the same.
func settleMerchant(ctx context.Context, rdb redis.Cmdable, merchantID string) {
	rdb.SetNX(ctx, "quota:all", "me", time.Minute) // want `constant lock key "quota:all" while this function works on one merchantID: .* \(quota:\{merchant_id\}\)`
}

// Negative: the policy declares "settle:all" as an exact pattern: a
// deliberate singleton.
func settle(ctx context.Context, rdb redis.Cmdable, merchantID string) {
	rdb.SetNX(ctx, "settle:all", "me", time.Minute)
}
