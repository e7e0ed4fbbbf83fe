package agent

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestEviction_AnEvictingRedisIsAFindingAndItsMetrics: the agent checks every
// Redis store it scans for eviction (maxmemory with a policy other than
// noeviction), reports it in /api/v1/findings and lockgov_findings, exports
// the policy, the limit and the keys Redis evicted between scans, and drops
// the finding once the store is set to noeviction. The agent coordinates
// through etcd here, so that the only keys in the Redis are the test's.
func TestEviction_AnEvictingRedisIsAFindingAndItsMetrics(t *testing.T) {
	e := testenv.NewEtcd(t)
	r := testenv.NewRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, kv := range [][2]string{{"maxmemory", "1gb"}, {"maxmemory-policy", "volatile-lru"}} {
		if err := admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	store := "redis://" + r.Addr()
	cfg := testConfig("agent")
	cfg.Etcd, cfg.Redis = e.Endpoints(), []string{store}
	a := start(t, cfg)

	evictionFinding := func() *detectors.Finding {
		for _, f := range findings(t, a).Findings {
			if f.Detector == detectors.DetectorStore && f.Kind == detectors.KindEvictionEnabled && f.Store == store {
				return &f
			}
		}
		return nil
	}
	waitFor(t, "an eviction_enabled finding", func() bool { return evictionFinding() != nil })
	if f := evictionFinding(); f.Severity != detectors.SeverityWarning || f.Key != "" {
		t.Errorf("finding %+v, want a warning about the store, no key", f)
	}
	for series, want := range map[string]string{
		`lockgov_findings{detector="store",kind="eviction_enabled",severity="warning"}`:     "1",
		`lockgov_agent_store_maxmemory_policy{policy="volatile-lru",store="` + store + `"}`: "1",
		`lockgov_agent_store_maxmemory_bytes{store="` + store + `"}`:                        "1.073741824e+09",
		`lockgov_agent_store_evicted_keys_total{store="` + store + `"}`:                     "0",
	} {
		if got := metric(t, a, series); got != want {
			t.Errorf("%s = %q, want %q", series, got, want)
		}
	}

	if err := admin.Set(ctx, "lock:payout:1", "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	n := testenv.Evict(t, admin, "volatile-lru", "lock:payout:1") // leaves noeviction, no limit
	evicted := `lockgov_agent_store_evicted_keys_total{store="` + store + `"}`
	waitFor(t, "the evictions counted", func() bool { return metric(t, a, evicted) == formatFloat(n) })
	waitFor(t, "the finding gone with noeviction", func() bool { return evictionFinding() == nil })
	if got := metric(t, a, `lockgov_agent_store_maxmemory_policy{policy="noeviction",store="`+store+`"}`); got != "1" {
		t.Errorf("policy noeviction = %q, want 1", got)
	}
	if got := metric(t, a, `lockgov_agent_store_maxmemory_policy{policy="volatile-lru",store="`+store+`"}`); got != "" {
		t.Errorf("the old policy's series is still exported: %q", got)
	}
}

func formatFloat(n int64) string {
	return strconv.FormatFloat(float64(n), 'g', -1, 64)
}
