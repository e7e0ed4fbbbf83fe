package detectors

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// PolicyUnknown is Eviction.Policy when a store did not say its
// maxmemory-policy (INFO refused by an ACL or renamed on a managed Redis,
// or a server too old to report it).
const PolicyUnknown = "unknown"

// Eviction is how one Redis store evicts keys, as the last Detect read it
// from INFO memory, INFO stats and INFO server on every node that holds keys.
type Eviction struct {
	Store string
	// Policy is the nodes' maxmemory-policy: an evicting one when the nodes
	// differ, PolicyUnknown when a node did not say.
	Policy string
	// MaxMemory is the largest maxmemory of the nodes in bytes, 0 for no
	// limit, -1 when unknown.
	MaxMemory int64
	// EvictedKeys is evicted_keys summed over the nodes (keys evicted since
	// each started or ran CONFIG RESETSTAT), -1 when unknown.
	EvictedKeys int64
	// NewlyEvicted is how many keys the nodes evicted since the previous
	// Detect, node by node: a node's rise, or its whole count when the
	// node restarted (its run_id changed: every key it counts now was
	// evicted since) or its count went down (CONFIG RESETSTAT). 0 on the
	// first Detect, and for a node not read before (a primary added or
	// promoted). A CONFIG RESETSTAT after which a node evicted as many
	// keys as before it by the next Detect reads as a rise: the keys up to
	// the old count are not counted (nothing tells that reset).
	NewlyEvicted int64
	// Evicting is true when a node deletes keys when its memory is full:
	// maxmemory > 0 and a policy other than noeviction.
	Evicting bool
	// Why says which nodes did not say their policy, and why (the error
	// Redis replied).
	Why string
}

// StoreConfig checks how a Redis store is configured for what lockgov keeps
// in it. Every lock, idempotency record, quota request record, WorkerID slot
// and fence with a TTL is a key Redis evicts under a volatile-* policy when
// memory is full (volatile-lru is AWS ElastiCache's default); allkeys-*
// evicts balances and fences without one too. An evicted lock can be taken
// by a second holder until the first's next renewal, a completed
// idempotency key runs its effect again, a retried deduction applies twice
// (each package's Failure modes). It reports:
//
//   - eviction_enabled: maxmemory > 0 and a maxmemory-policy other than
//     noeviction, on any node. Warning; critical when evicted_keys rose
//     since the previous Detect, i.e. Redis deleted keys in the last
//     interval (what it deleted is not known: possibly held locks). A count
//     that did not rise is history (the policy may have been set later, or
//     the keys were another application's) and stays a warning, as does the
//     first Detect after the agent starts, which has nothing to compare to.
//   - eviction_unknown (info): a node refused INFO (an ACL without +info, a
//     managed Redis that renamed it) or did not report maxmemory-policy;
//     the finding says why. It never fails Detect.
//
// It reads INFO memory, stats and server, never CONFIG GET: INFO reports
// maxmemory and maxmemory_policy since Redis 4.0, it is in the agent's
// documented ACL, and managed Redis services that disable CONFIG (AWS
// ElastiCache, for one) answer it; CONFIG GET would also let the agent's
// user read requirepass and masterauth. etcd stores are not checked: etcd
// does not evict (a full etcd refuses writes, as noeviction does).
type StoreConfig struct {
	s    Store
	mu   sync.Mutex
	last map[string]nodeCount // each node's evicted_keys at the previous Detect, by address
	ev   *Eviction
}

// NewStoreConfig returns the store-configuration detector of s. Options:
// WithNow only (findings have no age).
func NewStoreConfig(s Store, opts ...Option) (*StoreConfig, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	cfg, err := newConfig(DetectorStore, opts)
	if err != nil {
		return nil, err
	}
	if len(cfg.beats) > 0 || cfg.maxFindings != DefaultMaxFindings {
		return nil, fmt.Errorf("%w: WithHeartbeatsFrom and WithMaxFindings do not apply to the %s detector", ErrInvalid, DetectorStore)
	}
	return &StoreConfig{s: s}, nil
}

// Reset forgets the counts read so far: the next Detect is a first one,
// which counts no rise. An agent that leads again after another agent led
// (and counted and reported what Redis evicted meanwhile) calls it, so that
// it does not count those evictions a second time.
func (d *StoreConfig) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = nil
}

// Name returns "store".
func (d *StoreConfig) Name() string { return DetectorStore }

// Store returns the redacted address of the store it checks (the Store of
// its findings).
func (d *StoreConfig) Store() string { return d.s.Addr() }

// Eviction returns what the last successful Detect read, false before one
// or for an etcd store.
func (d *StoreConfig) Eviction() (Eviction, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ev == nil {
		return Eviction{}, false
	}
	return *d.ev, true
}

// Detect reads the store's eviction settings and evicted_keys. A store that
// cannot be reached is an error; one that refuses INFO is a finding.
func (d *StoreConfig) Detect(ctx context.Context) ([]Finding, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nodes, err := d.s.eviction(ctx)
	if err != nil {
		return nil, err
	}
	if nodes == nil { // etcd
		return nil, nil
	}
	ev := merge(d.s.Addr(), nodes)
	ev.NewlyEvicted, d.last = newlyEvicted(d.last, nodes)
	d.ev = &ev
	cli := d.s.cli()
	switch {
	case ev.Evicting:
		sev, rose, unknown := SeverityWarning, "", ""
		if ev.NewlyEvicted > 0 {
			sev, rose = SeverityCritical, fmt.Sprintf(", %d since the last scan: Redis is deleting keys now", ev.NewlyEvicted)
		}
		if ev.Why != "" {
			unknown = ". Not known for every node: " + ev.Why
		}
		return []Finding{{Detector: DetectorStore, Kind: KindEvictionEnabled, Severity: sev, Store: ev.Store,
			Detail: fmt.Sprintf("maxmemory %d bytes with maxmemory-policy %s: when memory is full Redis deletes keys %s, "+
				"so a held lock can be taken by a second holder until the first renews, a completed idempotency key runs again, "+
				"a retried quota deduction applies twice. evicted_keys %s%s%s",
				ev.MaxMemory, ev.Policy, candidates(ev.Policy), count(ev.EvictedKeys), rose, unknown),
			Action: cli + " INFO memory  # set it in redis.conf (or the managed Redis's parameter group) on every node too, " +
				"and size maxmemory for the keys; lockgov's keys need noeviction: " + cli + " CONFIG SET maxmemory-policy noeviction",
		}}, nil
	case ev.Policy == PolicyUnknown:
		return []Finding{{Detector: DetectorStore, Kind: KindEvictionUnknown, Severity: SeverityInfo, Store: ev.Store,
			Detail: "maxmemory-policy unknown: " + ev.Why + ". A policy other than noeviction lets Redis delete held locks, " +
				"idempotency records and quota records when memory is full; the agent cannot tell whether this store does",
			Action: "# grant the agent's user +info (docs/SECURITY.md), or read maxmemory-policy where the Redis is managed " +
				"(its parameter group): it must be noeviction",
		}}, nil
	}
	return nil, nil
}

// newlyEvicted counts the keys nodes evicted since last, each node's
// evicted_keys at the previous Detect, node by node (see
// Eviction.NewlyEvicted), and returns the counts to compare the next Detect
// with. Summed over the nodes first, a node's reset (a restart: its count
// back to 0) cancelled the others' rise, and a primary new to the sum (a
// replica promoted, a node added) added its whole history. A node whose
// run_id changed is another process (restarted, or replaced at the same
// address): every key it counts was evicted since it started, even when
// its count did not go down.
func newlyEvicted(last map[string]nodeCount, nodes []nodeEviction) (int64, map[string]nodeCount) {
	now := make(map[string]nodeCount, len(nodes))
	var newly int64
	for _, n := range nodes {
		if n.evicted < 0 {
			continue
		}
		now[n.addr] = nodeCount{n.evicted, n.runID}
		prev, seen := last[n.addr]
		switch {
		case !seen:
		case n.runID != "" && prev.runID != "" && n.runID != prev.runID:
			newly += n.evicted
		case n.evicted >= prev.evicted:
			newly += n.evicted - prev.evicted
		default:
			newly += n.evicted
		}
	}
	return newly, now
}

// nodeCount is one node's evicted_keys as a Detect read it, and the run_id
// of the process that counted them ("" when not reported).
type nodeCount struct {
	evicted int64
	runID   string
}

func count(n int64) string {
	if n < 0 {
		return PolicyUnknown
	}
	return strconv.FormatInt(n, 10)
}

// candidates says which keys policy evicts.
func candidates(policy string) string {
	if strings.HasPrefix(policy, "volatile-") {
		return "with a TTL (every lock, idempotency record, quota request record and WorkerID slot has one)"
	}
	return "of any kind (locks, idempotency records, quota balances and records, WorkerID slots, fences)"
}

// nodeEviction is what one node's INFO said.
type nodeEviction struct {
	addr      string
	policy    string // "" when not reported
	maxMemory int64  // -1 when not reported
	evicted   int64  // -1 when not reported
	runID     string // INFO server's run_id, "" when not reported
	why       string // the refusal, when INFO was refused
}

// merge sums up the nodes of store addr, in address order.
func merge(addr string, nodes []nodeEviction) Eviction {
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].addr < nodes[j].addr })
	ev := Eviction{Store: addr}
	var why []string
	unknown := len(nodes) == 0
	for _, n := range nodes {
		if n.policy == "" || n.maxMemory < 0 {
			unknown = true
			if n.why == "" {
				n.why = "INFO memory has no maxmemory_policy or maxmemory (Redis before 4.0?)"
			}
			why = append(why, n.addr+": "+n.why)
		} else {
			evicting := n.maxMemory > 0 && n.policy != "noeviction"
			if ev.Policy == "" || evicting && !ev.Evicting {
				ev.Policy = n.policy // an evicting node's policy wins
			}
			ev.Evicting = ev.Evicting || evicting
			ev.MaxMemory = max(ev.MaxMemory, n.maxMemory)
		}
		if n.evicted < 0 || ev.EvictedKeys < 0 {
			ev.EvictedKeys = -1
		} else {
			ev.EvictedKeys += n.evicted
		}
	}
	if unknown && !ev.Evicting {
		ev.Policy, ev.MaxMemory = PolicyUnknown, -1
	}
	ev.Why = strings.Join(why, "; ")
	return ev
}

// eviction reads INFO memory, INFO stats and INFO server on every node
// that holds keys (three commands in one pipeline: Redis before 7.0 takes
// one section per INFO); the server section's run_id tells a restart. A refusal (an error reply: NOPERM, an unknown command) is reported
// in the node's why, not as an error.
func (s *RedisStore) eviction(ctx context.Context) ([]nodeEviction, error) {
	var mu sync.Mutex
	var out []nodeEviction
	err := s.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		n := nodeEviction{addr: c.Options().Addr, maxMemory: -1, evicted: -1}
		pipe := c.Pipeline()
		mem := pipe.Info(ctx, "memory")
		stats := pipe.Info(ctx, "stats")
		server := pipe.Info(ctx, "server")
		_, err := pipe.Exec(ctx)
		var rerr redis.Error
		switch {
		case err == nil:
		case errors.As(err, &rerr) && !errors.Is(err, redis.Nil):
			n.why = "INFO refused: " + err.Error()
		default:
			return fmt.Errorf("detectors: INFO on %s: %w", n.addr, err)
		}
		if mem.Err() == nil {
			v := infoFields(mem.Val())
			n.policy = v["maxmemory_policy"]
			if x, err := strconv.ParseInt(v["maxmemory"], 10, 64); err == nil {
				n.maxMemory = x
			}
		}
		if stats.Err() == nil {
			if x, err := strconv.ParseInt(infoFields(stats.Val())["evicted_keys"], 10, 64); err == nil {
				n.evicted = x
			}
		}
		if server.Err() == nil {
			n.runID = infoFields(server.Val())["run_id"]
		}
		mu.Lock()
		out = append(out, n)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eviction of an etcd store is nil: etcd does not evict.
func (s *EtcdStore) eviction(context.Context) ([]nodeEviction, error) { return nil, nil }

// infoFields parses the "name:value" lines of an INFO reply.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.SplitSeq(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}
