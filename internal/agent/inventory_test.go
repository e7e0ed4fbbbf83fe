package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestScan_RedisCluster_ListsEveryPrimarysLocksWithoutCompanionKeys holds
// that the leader's inventory scans every primary, decodes holders with
// redislock's decoder, skips fence counters, and counts the keys it looked at.
func TestScan_RedisCluster_ListsEveryPrimarysLocksWithoutCompanionKeys(t *testing.T) {
	cl := testenv.NewRedisCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := redislock.New(c, redislock.WithService("stock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 30
	for i := range n {
		lease, err := l.Acquire(ctx, "lock:sku:"+strconv.Itoa(i), instrument.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
	}
	cfg := testConfig("agent")
	for _, addr := range cl.Addrs() {
		cfg.Redis = append(cfg.Redis, "redis://"+addr+"?cluster=1")
	}
	a := start(t, cfg)
	var doc struct {
		Locks []Lock `json:"locks"`
	}
	waitFor(t, fmt.Sprintf("%d locks in /api/v1/locks", n), func() bool {
		_, body := get(t, a.URL()+"api/v1/locks")
		return json.Unmarshal([]byte(body), &doc) == nil && len(doc.Locks) >= n
	})
	if len(doc.Locks) != n {
		t.Errorf("%d locks listed, want %d (companion keys must not be listed)", len(doc.Locks), n)
	}
	for _, lk := range doc.Locks {
		if lk.Holder.Service != "stock" || lk.Fence == 0 || lk.TTL <= 0 || lk.Pattern == "" {
			t.Errorf("lock %+v", lk)
		}
	}
	if v := metric(t, a, "lockgov_agent_keys_scanned_total"); v == "" || v == "0" {
		t.Errorf("lockgov_agent_keys_scanned_total = %q", v)
	}
}
