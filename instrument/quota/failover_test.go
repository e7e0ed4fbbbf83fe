package quota_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// failoverKey is the key the failover tests deduct from, with 10 units.
const failoverKey = "stock:sku-failover"

// replicatedStock starts a primary and a replica, sets failoverKey to 10
// units on the primary and waits until the replica has them.
func replicatedStock(t *testing.T, ctx context.Context) *testenv.Replicated {
	t.Helper()
	rp := testenv.NewReplicated(t)
	if err := newQuota(t, testenv.NewRedisClient(t, rp.Primary.Addr())).Set(ctx, failoverKey, 10); err != nil {
		t.Fatal(err)
	}
	rp.ReplicaHas(t, "the balance", func(c *redis.Client) bool {
		return c.HGet(ctx, quota.DefaultPrefix+"{"+failoverKey+"}", "remain").Val() == "10"
	})
	return rp
}

// failOver kills the primary and promotes the replica, and returns a Quota
// on the promoted replica: the client a failover points the caller at.
func failOver(t *testing.T, rp *testenv.Replicated) *quota.Quota {
	t.Helper()
	return newQuota(t, replicaacktest.FailOver(t, rp))
}

// TestFailover_DefaultLosesAnAcknowledgedDeduction is the failure mode the
// package doc states, on real servers: with asynchronous replication (the
// default), a Deduct the primary acknowledged but had not replicated is
// lost when the replica is promoted: the units are back, and the retry of
// the same request id deducts again (3 units taken twice for one order).
// It keeps the doc honest, and it shows that the failover below is sharp
// enough to lose a write, so that the WithReplicaAcks tests that use it
// are not vacuous.
func TestFailover_DefaultLosesAnAcknowledgedDeduction(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := replicatedStock(t, ctx)
	q := newQuota(t, testenv.NewRedisClient(t, rp.Primary.Addr()))

	rp.Link.Blackhole(true) // the deduction never reaches the replica
	left, err := q.Deduct(ctx, failoverKey, 3, "order-1")
	if err != nil || left != 7 {
		t.Fatalf("Deduct = %d, %v; want 7, nil", left, err)
	}
	promoted := failOver(t, rp)

	if got, err := promoted.Remaining(ctx, failoverKey); err != nil || got != 10 {
		t.Fatalf("after the failover Remaining = %d, %v; the documented loss brings the 3 units back (10)", got, err)
	}
	left, err = promoted.Deduct(ctx, failoverKey, 3, "order-1")
	if err != nil || left != 7 {
		t.Fatalf("the retry of order-1 on the promoted replica = %d, %v; the documented loss deducts it again (7, nil)", left, err)
	}
}
