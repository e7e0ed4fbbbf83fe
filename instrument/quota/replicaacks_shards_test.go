package quota_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// shardOf is the shard a request id's Deduct visits first (quota's
// shardOf: FNV-1a of the id modulo the shards).
func shardOf(id string, shards int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(shards))
}

// afterFirstPipeline is a hook that calls do once, after the first
// pipeline its client sends (and before that pipeline's caller hears it).
type afterFirstPipeline struct {
	once sync.Once
	do   func()
}

func (h *afterFirstPipeline) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *afterFirstPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *afterFirstPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.once.Do(h.do)
		return err
	}
}

// TestReplicaAcks_AShardedDeductStraddlingAFailoverAppliesAtMostOnce: two
// shards, the request's first shard empty, the other holding 10; the
// replication link blackholed. Deduct(3, "order-1") with WithReplicaAcks
// visits the empty shard on the primary: a -1 record (sending a retry on
// to the next shard), which no replica acknowledges. Between that visit
// and the next, the replica is promoted and the old primary rejoins as
// its replica (its full sync drops the -1 record), and the client
// reconnects to the new primary (as a Sentinel client does). A refund
// then fills the first shard with 3 and order-1 is retried. order-1 must
// have taken 3 units at most once in all: the balance ends at 10 (10 + 3
// refunded - 3). Before, the unacknowledged first visit did not stop the
// Deduct: the second shard's deduction on the new primary was
// acknowledged and reported done, and the retry, finding no record on the
// refilled first shard, deducted there too (7).
func TestReplicaAcks_AShardedDeductStraddlingAFailoverAppliesAtMostOnce(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := testenv.NewReplicated(t)
	const key, id, shards = "stock:sku-straddle", "order-1", 2
	first := shardOf(id, shards)
	bucket := func(i int) string { return fmt.Sprintf("%s{%s#%d}", quota.DefaultPrefix, key, i) }
	direct := testenv.NewRedisClient(t, rp.Primary.Addr())
	if err := direct.HSet(ctx, bucket(first), "remain", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := direct.HSet(ctx, bucket(1-first), "remain", 10).Err(); err != nil {
		t.Fatal(err)
	}
	rp.CaughtUp(t)

	// The client dials wherever target says: the failover client's view.
	var target atomic.Pointer[string]
	addr := rp.Primary.Addr()
	target.Store(&addr)
	o := *testenv.NewRedisClient(t, addr).Options()
	o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, *target.Load())
	}
	c := redis.NewClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	opts := []quota.Option{quota.WithShards(shards), quota.WithReplicaAcks(1, ackTimeout)}
	q := newQuota(t, c, opts...)

	// Load the scripts, so that the first pipeline is the first visit's.
	if _, err := q.Deduct(ctx, "warm", 1, "warm"); !errors.Is(err, quota.ErrInsufficient) {
		t.Fatalf("Deduct from an unset key = %v, want ErrInsufficient", err)
	}
	rp.Link.Blackhole(true) // the first visit's -1 record never reaches the replica
	old := rp.Primary
	c.AddHook(&afterFirstPipeline{do: func() {
		rp.Switchover(t)
		promoted := rp.Primary.Addr()
		target.Store(&promoted)
		// The client's connections to the old primary end, as a
		// Sentinel client closes them when the primary changes.
		if err := testenv.NewRedisClient(t, old.Addr()).Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err(); err != nil {
			t.Error(err)
		}
	}})
	if _, err := q.Deduct(ctx, key, 3, id); err != nil && !errors.Is(err, quota.ErrNotReplicated) {
		t.Fatalf("Deduct straddling the failover = %v; want success or ErrNotReplicated", err)
	}

	refundID := ""
	for i := 0; refundID == ""; i++ {
		if r := fmt.Sprintf("refund-%d", i); shardOf(r, shards) == first {
			refundID = r
		}
	}
	onNew := newQuota(t, testenv.NewRedisClient(t, rp.Primary.Addr()), opts...)
	if _, err := onNew.Refund(ctx, key, 3, refundID); err != nil {
		t.Fatalf("Refund on the new primary: %v", err)
	}
	if _, err := onNew.Deduct(ctx, key, 3, id); err != nil {
		t.Fatalf("the retry of %s on the new primary: %v", id, err)
	}
	if got, err := onNew.Remaining(ctx, key); err != nil || got != 10 {
		t.Fatalf("after the refund and the retry the balance is %d, %v; want 10 (10 + 3 - 3): %s took its 3 units twice", got, err, id)
	}
}
