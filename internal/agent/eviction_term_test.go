package agent

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/internal/testenv"
)

// TestEviction_ALeaderAgainDoesNotCountWhatAnotherLeaderCounted (h105): agent
// a leads and scans an evicting Redis, loses its leadership to b, which
// counts and reports the keys Redis then evicts, and leads again. Its
// detector remembered the count of its first term, so its first scan of
// the second counted b's evictions again: a rise of its
// lockgov_agent_store_evicted_keys_total (a second LockgovStoreEvictingKeys
// page, and sum() over the agents counted them twice) and a critical
// finding for evictions that may be long over. An agent that has served
// another leader's record since it last led starts counting afresh; what
// Redis evicts while it leads again is counted; b's counter keeps its value.
func TestEviction_ALeaderAgainDoesNotCountWhatAnotherLeaderCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := newEvictingStore(ctx, t)
	ec := s.etcd.Client(t)
	evicted := s.evicted
	cfgA, cfgB := testConfig("agent-a"), testConfig("agent-b")
	cfgA.Etcd, cfgB.Etcd = s.etcd.Endpoints(), s.etcd.Endpoints()
	cfgA.Redis, cfgB.Redis = []string{s.store}, []string{s.store}
	a := start(t, cfgA)
	waitFor(t, "a to lead", a.Leader)
	b := start(t, cfgB)
	waitFor(t, "a's first count", func() bool { return metric(t, a, evicted) == "0" })

	// resign ends id's term as a lost session does: its lease revoked.
	resign := func(id string) time.Time {
		t.Helper()
		resp, err := ec.Get(ctx, etcdElectionPrefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if string(kv.Value) == id {
				at := time.Now()
				if _, err := ec.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
					t.Fatal(err)
				}
				return at
			}
		}
		t.Fatalf("no election key of %s in %d", id, len(resp.Kvs))
		return time.Time{}
	}
	type served struct {
		ScannedAt *time.Time `json:"scanned_at"`
		Leader    bool       `json:"leader"`
		LeaderID  string     `json:"leader_id"`
	}
	serves := func(ag *Agent) served {
		_, body := get(t, ag.URL()+"api/v1/findings")
		var s served
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatalf("/api/v1/findings: %v: %s", err, body)
		}
		return s
	}

	resign("agent-a")
	waitFor(t, "a to stop leading", func() bool { return !a.Leader() })
	waitFor(t, "b to lead", b.Leader)
	waitFor(t, "b's first count", func() bool { return metric(t, b, evicted) == "0" })
	n := s.evict(ctx, t, "lock:payout:1")
	waitFor(t, "b to count the evictions", func() bool { return metric(t, b, evicted) == formatFloat(n) })
	counted := time.Now()
	waitFor(t, "a to serve b's record of them", func() bool {
		s := serves(a)
		return s.LeaderID == "agent-b" && s.ScannedAt != nil && s.ScannedAt.After(counted)
	})

	lost := resign("agent-b")
	waitFor(t, "b to stop leading", func() bool { return !b.Leader() })
	waitFor(t, "a to lead again", a.Leader)
	waitFor(t, "a scan of a's second term", func() bool {
		s := serves(a)
		return s.Leader && s.ScannedAt != nil && s.ScannedAt.After(lost)
	})
	if got := metric(t, a, evicted); got != "0" {
		t.Fatalf("a, leading again, counts %s evicted keys: b's %d counted a second time", got, n)
	}
	if got := metric(t, b, evicted); got != formatFloat(n) {
		t.Errorf("b's counter after its term = %s, want %d (a counter does not go back)", got, n)
	}
	m := s.evict(ctx, t, "lock:payout:2")
	waitFor(t, "a to count what Redis evicts while it leads again", func() bool { return metric(t, a, evicted) == formatFloat(m) })
}

// TestEviction_ALeaderAgainWithoutAnotherCountsTheGap (h105): an agent that
// lost its leadership because its coordination store was out of reach, with
// no other agent leading meanwhile, counts what Redis evicted in the gap
// when it leads again: nobody else counted it.
func TestEviction_ALeaderAgainWithoutAnotherCountsTheGap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := newEvictingStore(ctx, t)
	evicted := s.evicted
	cfg := testConfig("agent-a")
	cfg.Etcd, cfg.Redis = s.etcd.Endpoints(), []string{s.store}
	a := start(t, cfg)
	waitFor(t, "a to lead", a.Leader)
	waitFor(t, "a's first count", func() bool { return metric(t, a, evicted) == "0" })
	s.etcd.Stop()
	waitFor(t, "a to stop leading", func() bool { return !a.Leader() })
	n := s.evict(ctx, t, "lock:payout:1")
	if err := s.etcd.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to lead again", a.Leader)
	waitFor(t, "a to count the gap's evictions", func() bool { return metric(t, a, evicted) == formatFloat(n) })
}

// evictingStore is what the agents of these tests run on: an etcd for
// their election and a Redis set to evict (volatile-lru under maxmemory),
// with an admin client to fill it and evict from it.
type evictingStore struct {
	etcd    *testenv.Etcd
	admin   *redis.Client
	store   string // the agents' Config.Redis entry
	evicted string // the store's lockgov_agent_store_evicted_keys_total series
}

func newEvictingStore(ctx context.Context, t *testing.T) *evictingStore {
	t.Helper()
	e := testenv.NewEtcd(t)
	r := testenv.NewRedis(t)
	store := "redis://" + r.Addr()
	s := &evictingStore{
		etcd:    e,
		admin:   r.Client(t),
		store:   store,
		evicted: `lockgov_agent_store_evicted_keys_total{store="` + store + `"}`,
	}
	s.evicting(ctx, t)
	return s
}

// evicting sets the Redis to evict again (testenv.Evict leaves it at
// noeviction).
func (s *evictingStore) evicting(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, kv := range [][2]string{{"maxmemory", "1gb"}, {"maxmemory-policy", "volatile-lru"}} {
		if err := s.admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// evict writes key with a TTL, has Redis evict it and returns how many
// keys Redis evicted for it (testenv.Evict), leaving the Redis evicting.
func (s *evictingStore) evict(ctx context.Context, t *testing.T, key string) int64 {
	t.Helper()
	if err := s.admin.Set(ctx, key, "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	n := testenv.Evict(t, s.admin, "volatile-lru", key)
	s.evicting(ctx, t)
	return n
}
