package detectors_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/internal/testenv"
)

func newStoreConfig(t testing.TB, s detectors.Store) *detectors.StoreConfig {
	t.Helper()
	d, err := detectors.NewStoreConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func configSet(t testing.TB, ctx context.Context, c redis.Cmdable, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := c.ConfigSet(ctx, kv[i], kv[i+1]).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", kv[i], kv[i+1], err)
		}
	}
}

// TestStoreConfig_OnlyALimitWithAnEvictingPolicyIsAFinding: a store without
// maxmemory, or with noeviction, keeps every key lockgov writes until it
// expires or is deleted; any other policy under a limit deletes them when
// memory is full.
func TestStoreConfig_OnlyALimitWithAnEvictingPolicyIsAFinding(t *testing.T) {
	t.Parallel()
	c := newRedis(t)
	d := newStoreConfig(t, redisStore(t, c))
	ctx := timeout(t, 30*time.Second)
	for _, tc := range []struct {
		maxmemory, policy string
		want              bool
	}{
		{"0", "noeviction", false},
		{"0", "allkeys-lru", false}, // no limit: nothing is evicted
		{"1gb", "noeviction", false},
		{"1gb", "volatile-lru", true},
		{"1gb", "volatile-ttl", true},
		{"1gb", "allkeys-random", true},
	} {
		configSet(t, ctx, c, "maxmemory", tc.maxmemory, "maxmemory-policy", tc.policy)
		fs := detect(t, ctx, d)
		ev, ok := d.Eviction()
		if !ok || ev.Policy != tc.policy || ev.Evicting != tc.want || ev.EvictedKeys != 0 || (tc.maxmemory == "0") != (ev.MaxMemory == 0) {
			t.Errorf("%s %s: Eviction() = %+v, %v", tc.maxmemory, tc.policy, ev, ok)
		}
		if !tc.want {
			if len(fs) != 0 {
				t.Errorf("%s %s: findings%s", tc.maxmemory, tc.policy, describe(fs))
			}
			continue
		}
		if len(fs) != 1 || fs[0].Kind != detectors.KindEvictionEnabled || fs[0].Severity != detectors.SeverityWarning ||
			!strings.Contains(fs[0].Detail, tc.policy) {
			t.Errorf("%s %s: findings%s, want one eviction_enabled warning naming the policy", tc.maxmemory, tc.policy, describe(fs))
			continue
		}
		checkAction(t, fs[0], want{cli: "redis-cli", arg: "memory", free: "noeviction"})
	}
}

// TestStoreConfig_CriticalWhileRedisEvicts: evicted_keys rising between two
// scans means Redis deleted keys in the interval (held locks among them,
// perhaps): critical. The next scan without a rise is a warning again.
func TestStoreConfig_CriticalWhileRedisEvicts(t *testing.T) {
	t.Parallel()
	c := newRedis(t)
	d := newStoreConfig(t, redisStore(t, c))
	ctx := timeout(t, 30*time.Second)
	evicting := func() { configSet(t, ctx, c, "maxmemory", "1gb", "maxmemory-policy", "volatile-lru") }
	severity := func(want string, newly bool) {
		t.Helper()
		fs := detect(t, ctx, d)
		ev, _ := d.Eviction()
		if len(fs) != 1 || fs[0].Kind != detectors.KindEvictionEnabled || fs[0].Severity != want || (ev.NewlyEvicted > 0) != newly {
			t.Fatalf("findings%s; eviction %+v; want one eviction_enabled %s", describe(fs), ev, want)
		}
	}
	evicting()
	severity(detectors.SeverityWarning, false)

	if err := c.Set(ctx, "lock:payout:1", "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	n := testenv.Evict(t, c, "volatile-lru", "lock:payout:1") // leaves noeviction behind
	evicting()
	severity(detectors.SeverityCritical, true)
	if ev, _ := d.Eviction(); ev.NewlyEvicted != n || ev.EvictedKeys != n {
		t.Fatalf("eviction %+v, want %d keys evicted, all of them new", ev, n)
	}
	severity(detectors.SeverityWarning, false)
}

// TestStoreConfig_ARefusedINFOIsUnknownNotAnError: an ACL without +info (or
// a managed Redis that renamed INFO) leaves the policy unknown. That is an
// info finding saying so; Detect does not fail, so the other detectors'
// findings still count as a scan.
func TestStoreConfig_ARefusedINFOIsUnknownNotAnError(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t, testenv.WithRedisACLUser("no-info", "pw", "~*", "+@read", "-info", "+ping", "+hello"))
	c := redis.NewClient(r.ClientOptions("no-info", "pw"))
	t.Cleanup(func() { _ = c.Close() })
	d := newStoreConfig(t, redisStore(t, c))
	ctx := timeout(t, 30*time.Second)
	fs := detect(t, ctx, d)
	if len(fs) != 1 || fs[0].Kind != detectors.KindEvictionUnknown || fs[0].Severity != detectors.SeverityInfo ||
		!strings.Contains(fs[0].Detail, "NOPERM") {
		t.Fatalf("findings%s, want one eviction_unknown info naming the refusal", describe(fs))
	}
	checkAction(t, fs[0], want{})
	if ev, ok := d.Eviction(); !ok || ev.Policy != detectors.PolicyUnknown || ev.MaxMemory != -1 || ev.EvictedKeys != -1 || ev.Evicting {
		t.Fatalf("Eviction() = %+v, %v; want all unknown", ev, ok)
	}
}

// TestStoreConfig_AStoreDownIsAnError: a store that does not answer is the
// store down (Detect's error, as for every detector), not a policy unknown.
func TestStoreConfig_AStoreDownIsAnError(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	d := newStoreConfig(t, redisStore(t, c))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	fs, err := d.Detect(timeout(t, 30*time.Second))
	if err == nil || len(fs) != 0 {
		t.Fatalf("Detect on a stopped Redis = %v, %v; want an error and no findings", describe(fs), err)
	}
}

// TestStoreConfig_OneEvictingClusterNodeIsAFinding: Cluster nodes are
// configured one by one; one primary with an evicting policy is enough to
// lose the locks in its slots.
func TestStoreConfig_OneEvictingClusterNodeIsAFinding(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	ctx := timeout(t, 60*time.Second)
	d := newStoreConfig(t, redisStore(t, cl))
	if fs := detect(t, ctx, d); len(fs) != 0 {
		t.Fatalf("findings on a default Cluster%s", describe(fs))
	}
	var (
		mu  sync.Mutex
		one *redis.Client
	)
	if err := cl.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		// The last by address: merge reads nodes in address order, and an
		// evicting node must count wherever it comes.
		if one == nil || c.Options().Addr > one.Options().Addr {
			one = c
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	configSet(t, ctx, one, "maxmemory", "1gb", "maxmemory-policy", "allkeys-lru")
	t.Cleanup(func() { configSet(t, context.Background(), one, "maxmemory", "0", "maxmemory-policy", "noeviction") })
	fs := detect(t, ctx, d)
	if len(fs) != 1 || fs[0].Kind != detectors.KindEvictionEnabled || !strings.Contains(fs[0].Detail, "allkeys-lru") {
		t.Fatalf("findings%s, want one eviction_enabled naming allkeys-lru", describe(fs))
	}
}

// TestStoreConfig_EtcdIsNotChecked: etcd does not evict.
func TestStoreConfig_EtcdIsNotChecked(t *testing.T) {
	t.Parallel()
	d := newStoreConfig(t, etcdStore(t, newEtcd(t)))
	if fs := detect(t, timeout(t, 30*time.Second), d); len(fs) != 0 {
		t.Fatalf("findings on etcd%s", describe(fs))
	}
	if ev, ok := d.Eviction(); ok {
		t.Fatalf("Eviction() on etcd = %+v, true", ev)
	}
}

// TestStoreConfig_EvictionsAfterAStatsResetAreCounted (h100): evicted_keys
// starts again from 0 when Redis restarts (a Redis short of memory is one
// that gets restarted) or runs CONFIG RESETSTAT. The keys it evicted after
// that and before the next scan were evicted in the interval: critical,
// counted. Comparing the count with the previous scan's alone read a count
// that went down as "nothing new", and a node's reset hid the rise of the
// others in a Cluster's sum.
func TestStoreConfig_EvictionsAfterAStatsResetAreCounted(t *testing.T) {
	t.Parallel()
	c := newRedis(t)
	d := newStoreConfig(t, redisStore(t, c))
	ctx := timeout(t, 30*time.Second)
	evicting := func() { configSet(t, ctx, c, "maxmemory", "1gb", "maxmemory-policy", "volatile-lru") }
	evicting()
	detect(t, ctx, d)
	for _, k := range []string{"lock:a", "lock:b"} {
		if err := c.Set(ctx, k, "x", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n1 := testenv.Evict(t, c, "volatile-lru", "lock:a", "lock:b")
	evicting()
	detect(t, ctx, d)
	if ev, _ := d.Eviction(); ev.NewlyEvicted != n1 {
		t.Fatalf("eviction %+v, want %d newly evicted", ev, n1)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "lock:c", "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	n2 := testenv.Evict(t, c, "volatile-lru", "lock:c")
	evicting()
	fs := detect(t, ctx, d)
	ev, _ := d.Eviction()
	if len(fs) != 1 || fs[0].Severity != detectors.SeverityCritical || ev.NewlyEvicted != n2 {
		t.Fatalf("after a stats reset and %d evictions (%d before it): findings%s, eviction %+v; want critical, %d newly evicted",
			n2, n1, describe(fs), ev, n2)
	}
}
