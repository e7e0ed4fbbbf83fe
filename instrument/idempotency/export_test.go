package idempotency

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// ClaimWithoutOwner claims key as an attempt that then dies: nothing renews
// its lease or finishes it.
func ClaimWithoutOwner(ctx context.Context, s *Store, c redis.UniversalClient, key string, fp []byte) error {
	return beginScript.Run(ctx, c, []string{s.cfg.prefix + "{" + key + "}"}, token(), s.leaseMS, fp, s.ttlMS).Err()
}

// TakeOver makes key owned by another attempt, as a successor does once an
// owner's lease ran out.
func TakeOver(ctx context.Context, s *Store, c redis.UniversalClient, key string) error {
	return c.HSet(ctx, s.cfg.prefix+"{"+key+"}", "owner", token()).Err()
}

// OutcomeCounter is lockgov_idempotency_requests_total{outcome}.
func (s *Store) OutcomeCounter(outcome string) prometheus.Counter { return s.outcome[outcome] }
