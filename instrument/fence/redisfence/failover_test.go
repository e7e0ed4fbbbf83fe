package redisfence_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// failoverKey is the value the failover tests fence; fence 1's value is on
// both servers before each test cuts replication.
const failoverKey = "stock:{sku-9}"

// replicatedValue starts a primary and a replica with failoverKey written
// under fence 1 on both.
func replicatedValue(t *testing.T, ctx context.Context) *testenv.Replicated {
	t.Helper()
	rp := testenv.NewReplicated(t)
	if err := newWriter(t, testenv.NewRedisClient(t, rp.Primary.Addr())).Set(ctx, failoverKey, "first", 1, 0); err != nil {
		t.Fatal(err)
	}
	rp.ReplicaHas(t, "fence 1's value", func(c *redis.Client) bool {
		v, f, err := newWriter(t, c).Get(ctx, failoverKey)
		return err == nil && v == "first" && f == 1
	})
	return rp
}

// TestFailover_DefaultLetsAStaleHolderWriteOnceMore is the failure mode the
// package doc states, on real servers: without WithReplicaAcks, holder A's
// Set under fence 10 returns nil on the primary, the replication link drops
// it (blackholed), the primary is killed and the replica promoted. The
// promoted replica holds fence 1: a stale holder's Set under fence 5, an
// older lease than A's, is accepted there and its value replaces A's. It
// keeps the doc honest, and it shows that the failover is sharp enough to
// lose a fenced write, so that the WithReplicaAcks tests that use it are
// not vacuous.
func TestFailover_DefaultLetsAStaleHolderWriteOnceMore(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	rp := replicatedValue(t, ctx)
	w := newWriter(t, testenv.NewRedisClient(t, rp.Primary.Addr()))

	rp.Link.Blackhole(true) // A's write never reaches the replica
	if err := w.Set(ctx, failoverKey, "A", 10, 0); err != nil {
		t.Fatalf("A's Set under fence 10 = %v; want nil", err)
	}
	promoted := newWriter(t, replicaacktest.FailOver(t, rp))

	if v, f, err := promoted.Get(ctx, failoverKey); err != nil || v != "first" || f != 1 {
		t.Fatalf("after the failover Get = %q %d %v; the documented loss leaves fence 1's value", v, f, err)
	}
	if err := promoted.Set(ctx, failoverKey, "stale", 5, 0); err != nil {
		t.Fatalf("the stale holder's Set under fence 5 = %v; the documented hole accepts it (nil)", err)
	}
	if v, f, err := promoted.Get(ctx, failoverKey); err != nil || v != "stale" || f != 5 {
		t.Fatalf("Get = %q %d %v; the documented hole stores the stale value under fence 5", v, f, err)
	}
}
