package redisfence_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_APrimaryRestartedEmptyWipesTheAcknowledgedFence (h105) is
// the package doc's "restart without persistence" on real servers, with
// WithReplicaAcks(1, ...): A's Set under fence 10 returns nil, acknowledged
// (the replica has it). The primary restarts without persistence before
// any failover (testenv's Redis runs with no RDB, no AOF, as a crash and an
// automatic restart do): it comes back empty under a new replication ID,
// and the replica, which reconnects and cannot continue the old stream,
// takes a full resync from it and drops everything it had, A's fence
// included. A stale holder's Set under fence 5 is then accepted, and
// acknowledged: the option keeps nothing across such a restart, on the
// primary or on the replicas that acknowledged. Only a failover that
// promotes an acknowledging replica before the old primary comes back keeps
// the write (TestReplicaAcks_AnAcknowledgedWriteSurvivesFailoverAndRefusesTheStaleFence).
func TestReplicaAcks_APrimaryRestartedEmptyWipesTheAcknowledgedFence(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	rp := replicatedValue(t, ctx)
	cp, cr := testenv.NewRedisClient(t, rp.Primary.Addr()), testenv.NewRedisClient(t, rp.Replica.Addr())
	w := newAckedWriter(t, cp, 1, healthyAckTimeout)
	if err := w.Set(ctx, failoverKey, "A", 10, 0); err != nil {
		t.Fatalf("A's Set under fence 10 = %v; want nil (acknowledged)", err)
	}
	onReplica := newWriter(t, cr)
	wantValue(t, ctx, "the replica after A's acknowledged Set", onReplica, "A", 10)

	if err := rp.Primary.Restart(); err != nil {
		t.Fatal(err)
	}
	replid := func(c *redis.Client, field string) string {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return ""
		}
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
				return v
			}
		}
		return ""
	}
	testenv.WaitFor(t, 30*time.Second, "the replica to follow the restarted primary", func() bool {
		p := replid(cp, "master_replid")
		return p != "" && replid(cr, "master_link_status") == "up" && replid(cr, "master_replid") == p
	})
	if v, f, err := onReplica.Get(ctx, failoverKey); !errors.Is(err, redis.Nil) {
		t.Fatalf("the replica after the primary's empty restart: Get = %q %d %v; want nothing (the full resync wiped it)", v, f, err)
	}
	testenv.WaitFor(t, 30*time.Second, "the primary to count the replica", func() bool {
		return cp.Wait(ctx, 1, 50*time.Millisecond).Val() == 1
	})
	if err := w.Set(ctx, failoverKey, "stale", 5, 0); err != nil {
		t.Fatalf("the stale holder's Set under fence 5 = %v; the documented hole accepts it, acknowledged (nil)", err)
	}
	wantValue(t, ctx, "the replica after the stale Set", onReplica, "stale", 5)
}
