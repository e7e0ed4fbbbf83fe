package idempotency

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ClaimWithoutOwner claims key as an attempt that then dies: nothing renews
// its lease or finishes it.
func ClaimWithoutOwner(ctx context.Context, s *Store, c redis.UniversalClient, key string, fp []byte) error {
	return beginScript.Run(ctx, c, []string{s.cfg.prefix + "{" + key + "}"}, token(), s.leaseMS, fp, s.ttlMS).Err()
}
