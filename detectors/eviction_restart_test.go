package detectors_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestStoreConfig_ARestartedNodeCountsEveryEvictionSinceItStarted (h105): a
// Redis restarted between two scans starts evicted_keys from 0, and one
// short of memory evicts again at once. When it evicted as many keys as it
// had before the restart, or more, by the next scan, its count did not go
// down, and reading only the count took the restart for a rise: the keys it
// evicted up to its old count were lost (none at all when it reached
// exactly the old count: no critical finding, no rise of
// lockgov_agent_store_evicted_keys_total). INFO server's run_id changes
// with every start: a node whose run_id changed counts its whole count.
func TestStoreConfig_ARestartedNodeCountsEveryEvictionSinceItStarted(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := r.Client(t)
	d := newStoreConfig(t, redisStore(t, c))
	ctx := timeout(t, time.Minute)
	evicting := func() { configSet(t, ctx, c, "maxmemory", "1gb", "maxmemory-policy", "volatile-lru") }
	evictSome := func(prefix string, keys int) int64 {
		var ks []string
		for i := range keys {
			k := prefix + strconv.Itoa(i)
			if err := c.Set(ctx, k, "x", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			ks = append(ks, k)
		}
		return testenv.Evict(t, c, "volatile-lru", ks...)
	}
	evicting()
	detect(t, ctx, d)
	n1 := evictSome("lock:before:", 2)
	evicting()
	detect(t, ctx, d)
	if ev, _ := d.Eviction(); ev.NewlyEvicted != n1 {
		t.Fatalf("eviction %+v, want %d newly evicted", ev, n1)
	}

	if err := r.Restart(); err != nil { // empty, its stats and config from scratch
		t.Fatal(err)
	}
	var n2 int64
	for i := 0; n2 < n1; i++ { // at least as many as before: the count does not go down
		n2 += evictSome("lock:after:"+strconv.Itoa(i)+":", 2)
	}
	evicting()
	fs := detect(t, ctx, d)
	ev, _ := d.Eviction()
	if len(fs) != 1 || fs[0].Severity != detectors.SeverityCritical || ev.NewlyEvicted != n2 || ev.EvictedKeys != n2 {
		t.Fatalf("after a restart and %d evictions (%d before it): findings%s, eviction %+v; want critical, %d newly evicted",
			n2, n1, describe(fs), ev, n2)
	}
	// And the next scan counts from there, not the whole count again.
	evicting()
	detect(t, ctx, d)
	if ev, _ := d.Eviction(); ev.NewlyEvicted != 0 {
		t.Fatalf("the scan after: eviction %+v, want nothing new", ev)
	}
}
