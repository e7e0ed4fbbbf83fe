package detectors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
)

const testPolicy = `
patterns:
  - pattern: "lock:short:{id}"
    ttl: 1s
    max_ttl: 2s
  - pattern: "lock:hold:{id}"
    max_hold: 1m
`

func loadPolicy(t testing.TB) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func acquire(t testing.TB, ctx context.Context, l instrument.Locker, key string, opts ...instrument.AcquireOption) instrument.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, key, append([]instrument.AcquireOption{instrument.FailFast()}, opts...)...)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	return lease
}

// deadValue is a lock value in redislock's framing ("<token> <fence>
// <json>") written by a process on another host, which this test plays.
func deadValue(instance string, pid int) string {
	return fmt.Sprintf(`tok%d 5 {"service":"svc","instance":%q,"host":"host-%s","pid":%d,"v":"test","ttl_ms":60000,"acquired_at_ms":%d,"fence":5}`,
		pid, instance, instance, pid, time.Now().UnixMilli())
}

// scenario puts one lock of every kind, and healthy ones, into a store and
// returns the expected findings of each kind after the heartbeat of
// "pod-dead" is removed.
type scenario struct {
	store     detectors.Store
	beats     any // the client heartbeats are written with
	setup     func(t *testing.T, ctx context.Context)
	wantByKey map[string][]string // kind -> keys
}

func redisScenario(t *testing.T, c redis.UniversalClient) scenario {
	return scenario{
		store: redisStore(t, c),
		beats: c,
		setup: func(t *testing.T, ctx context.Context) {
			l, err := redislock.New(c, redislock.WithService("test"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			// A lockgov lock whose TTL was removed (PERSIST): immortal, though its
			// holder is live.
			acquire(t, ctx, l, "lock:immortal:gov", instrument.WithTTL(time.Hour), instrument.WithoutWatchdog())
			if err := c.Persist(ctx, "lock:immortal:gov").Err(); err != nil {
				t.Fatal(err)
			}
			// SETNX by another library that crashed before EXPIRE.
			if err := c.Set(ctx, "lock:immortal:foreign", "some-token", 0).Err(); err != nil {
				t.Fatal(err)
			}
			acquire(t, ctx, l, "lock:short:1", instrument.WithTTL(30*time.Second))
			acquire(t, ctx, l, "lock:hold:1", instrument.WithTTL(30*time.Second))
			if err := c.Set(ctx, "lock:dead:1", deadValue("pod-dead", 777), time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			// Healthy: a live lockgov lock, a foreign value with a TTL.
			acquire(t, ctx, l, "lock:ok:1", instrument.WithTTL(30*time.Second))
			if err := c.Set(ctx, "lock:foreign:ttl", "bsm-token", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func etcdScenario(t *testing.T, c *clientv3.Client) scenario {
	entry := func(key string, lease int64) string {
		return etcdlock.DefaultPrefix + key + "\x00" + fmt.Sprintf("%016x", lease)
	}
	return scenario{
		store: etcdStore(t, c),
		beats: c,
		setup: func(t *testing.T, ctx context.Context) {
			l, err := etcdlock.New(c, etcdlock.WithService("test"))
			if err != nil {
				t.Fatal(err)
			}
			// A lockgov-format entry with no lease, and a key of another writer
			// under the prefix without a lease: both immortal.
			if _, err := c.Put(ctx, entry("lock:immortal:gov", 1), `{"service":"test","pid":1}`); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Put(ctx, etcdlock.DefaultPrefix+"lock:immortal:foreign", "token"); err != nil {
				t.Fatal(err)
			}
			acquire(t, ctx, l, "lock:short:1", instrument.WithTTL(30*time.Second))
			acquire(t, ctx, l, "lock:hold:1", instrument.WithTTL(30*time.Second))
			grant, err := c.Grant(ctx, 60)
			if err != nil {
				t.Fatal(err)
			}
			v := deadValue("pod-dead", 777)
			v = v[strings.Index(v, "{"):] // etcd values are the JSON alone
			if _, err := c.Put(ctx, entry("lock:dead:1", int64(grant.ID)), v, clientv3.WithLease(grant.ID)); err != nil {
				t.Fatal(err)
			}
			acquire(t, ctx, l, "lock:ok:1", instrument.WithTTL(30*time.Second))
		},
	}
}

// TestLocks_EveryKindOnRealStores creates each leaked-lock condition on a
// real Redis, a real Redis Cluster and a real etcd, and checks that each is
// reported with its kind, and that nothing else is: not the healthy lock,
// not the foreign value with a TTL, not the locks of the live process.
func TestLocks_EveryKindOnRealStores(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		make func(t *testing.T) scenario
	}{
		{"redis", func(t *testing.T) scenario { return redisScenario(t, newRedis(t)) }},
		{"cluster", func(t *testing.T) scenario { return redisScenario(t, newCluster(t)) }},
		{"etcd", func(t *testing.T) scenario { return etcdScenario(t, newEtcd(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := timeout(t, 2*time.Minute)
			sc := tc.make(t)
			sc.setup(t, ctx)
			putBeat(t, ctx, sc.beats, selfBeat("self"))
			putBeat(t, ctx, sc.beats, otherBeat("pod-dead", 777))
			later := func() time.Time { return time.Now().Add(2 * time.Minute) }
			d, err := detectors.NewLocks(sc.store, detectors.WithPolicy(loadPolicy(t)), detectors.WithNow(later))
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]string{
				detectors.KindImmortal:    {"lock:immortal:foreign", "lock:immortal:gov"},
				detectors.KindTTLAboveMax: {"lock:short:1"},
				detectors.KindHeldTooLong: {"lock:hold:1"},
			}
			if tc.name == "etcd" {
				want[detectors.KindImmortal][0] = etcdlock.DefaultPrefix + "lock:immortal:foreign"
			}
			check := func(fs []detectors.Finding, want map[string][]string) {
				t.Helper()
				got := map[string][]string{}
				for _, f := range fs {
					got[f.Kind] = append(got[f.Kind], f.Key)
				}
				for _, keys := range want {
					sort.Strings(keys)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("findings by kind:\n got %v\nwant %v%s", got, want, describe(fs))
				}
			}
			check(detect(t, ctx, d), want) // pod-dead is live: its lock is healthy

			delBeat(t, ctx, sc.beats, "pod-dead")
			fs := detect(t, ctx, d)
			if testing.Verbose() {
				for _, f := range fs {
					t.Logf("%s %s: %s\n\taction: %s", f.Kind, f.Key, f.Detail, f.Action)
				}
			}
			want[detectors.KindHolderDead] = []string{"lock:dead:1"}
			check(fs, want)
			for _, f := range fs {
				switch f.Kind {
				case detectors.KindImmortal:
					if f.Severity != detectors.SeverityCritical {
						t.Errorf("immortal severity %s", f.Severity)
					}
					if strings.HasSuffix(f.Key, "foreign") && (f.Holder == nil || !f.Holder.Foreign) {
						t.Errorf("foreign immortal lock: holder %+v, want foreign", f.Holder)
					}
				case detectors.KindHolderDead:
					if f.Holder == nil || f.Holder.Instance != "pod-dead" || f.Holder.Heartbeat != "gone" {
						t.Errorf("holder_dead holder %+v", f.Holder)
					}
				case detectors.KindHeldTooLong:
					if f.Age < time.Minute || f.KeyPattern != "lock:hold:{id}" {
						t.Errorf("held_too_long age %s pattern %q", f.Age, f.KeyPattern)
					}
				}
				if !strings.Contains(f.Action, "redis-cli") && !strings.Contains(f.Action, "etcdctl") {
					t.Errorf("%s action names no command: %s", f.Kind, f.Action)
				}
				if f.Store != sc.store.Addr() || strings.Contains(f.Store, "@") {
					t.Errorf("store %q", f.Store)
				}
			}
		})
	}
}

// TestLocks_HealthyStoreHasNoFinding holds 10,000 locks of a live process,
// written the way redislock writes them (pipelined, for speed) plus real
// locks, and checks that no finding comes out: with the process's
// heartbeats on, and with them off (never published).
func TestLocks_HealthyStoreHasNoFinding(t *testing.T) {
	t.Parallel()
	for _, beats := range []bool{true, false} {
		t.Run("heartbeats="+strconv.FormatBool(beats), func(t *testing.T) {
			ctx := timeout(t, 2*time.Minute)
			c := newRedis(t)
			fillHealthy(t, ctx, c, 10000)
			l, err := redislock.New(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			for i := range 20 {
				acquire(t, ctx, l, "lock:real:"+strconv.Itoa(i), instrument.WithTTL(30*time.Second))
			}
			if beats {
				putBeat(t, ctx, c, selfBeat("self"))
			}
			d, err := detectors.NewLocks(redisStore(t, c, detectors.WithScanCount(500)))
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if fs := detect(t, ctx, d); len(fs) != 0 {
					t.Fatalf("%d findings on a healthy store:%s", len(fs), describe(fs[:min(len(fs), 5)]))
				}
			}
			if n := d.Scanned(); n != 10020 {
				t.Fatalf("scanned %d locks, want 10020", n)
			}
		})
	}
}

// fillHealthy writes n lock values of this process in redislock's framing,
// under a 5-minute TTL, with pipelines of 1,000.
func fillHealthy(t testing.TB, ctx context.Context, c redis.UniversalClient, n int) {
	t.Helper()
	v := liveValue()
	for i := 0; i < n; i += 1000 {
		pipe := c.Pipeline()
		for j := i; j < min(i+1000, n); j++ {
			pipe.Set(ctx, "lock:order:"+strconv.Itoa(j), v, 5*time.Minute)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLocks_Sentinel: a store over the Sentinel failover client (a
// redis.UniversalClient) finds an immortal lock on the primary.
func TestLocks_Sentinel(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	sn := testenv.NewSentinel(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testenv.SentinelMaster,
		SentinelAddrs: []string{sn.Sentinel.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Set(ctx, "lock:immortal", "tok", 0).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := detectors.NewLocks(redisStore(t, c, detectors.WithAddr("redis-sentinel://"+sn.Sentinel.Addr()+"/lockgov")))
	if err != nil {
		t.Fatal(err)
	}
	fs := detect(t, ctx, d)
	if len(fs) != 1 || fs[0].Kind != detectors.KindImmortal || fs[0].Key != "lock:immortal" {
		t.Fatalf("findings:%s", describe(fs))
	}
}

// TestLocks_AHolderWithAHeartbeatOverTheSizeLimitIsAlive: a process seen
// publishing heartbeats whose heartbeat key is still there but no longer
// decodes (over fleet.MaxBeatBytes, as a publisher before the cap wrote
// one, or damaged) is alive: its lock is not holder_dead, on Redis and on
// etcd. Neither is a lock its truncated heartbeat leaves out. Once the key
// is gone, the lock is holder_dead.
func TestLocks_AHolderWithAHeartbeatOverTheSizeLimitIsAlive(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"redis", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			ctx := timeout(t, time.Minute)
			var s detectors.Store
			var client any
			// putLock writes a lock of the process "bulky" (pid 9) under a TTL.
			var putLock func(key string)
			if backend == "redis" {
				c := newRedis(t)
				s, client = redisStore(t, c), c
				putLock = func(key string) {
					if err := c.Set(ctx, key, deadValue("bulky", 9), time.Minute).Err(); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				c := newEtcd(t)
				s, client = etcdStore(t, c), c
				putLock = func(key string) {
					grant, err := c.Grant(ctx, 60)
					if err != nil {
						t.Fatal(err)
					}
					v := deadValue("bulky", 9)
					entry := etcdlock.DefaultPrefix + key + "\x00" + fmt.Sprintf("%016x", int64(grant.ID))
					if _, err := c.Put(ctx, entry, v[strings.Index(v, "{"):], clientv3.WithLease(grant.ID)); err != nil {
						t.Fatal(err)
					}
				}
			}
			putLock("lock:bulk:1")
			putLock("lock:bulk:2")
			// The heartbeat is named as by default (host and pid), the lock
			// values by the host: the two meet by host and pid.
			hb := otherBeat("bulky", 9)
			hb.Instance = "bulky-9"
			hb.Held = []fleet.HeldLock{{Key: "lock:bulk:1", Backend: backend, Since: time.Now()}}
			putBeat(t, ctx, client, hb)
			d, err := detectors.NewLocks(s)
			if err != nil {
				t.Fatal(err)
			}
			if fs := detect(t, ctx, d); len(fs) != 0 {
				t.Fatalf("the live process's locks:%s", describe(fs))
			}

			// A truncated beat that lists neither lock: the process is alive.
			hb.Held, hb.Truncated = nil, true
			putBeat(t, ctx, client, hb)
			if fs := detect(t, ctx, d); len(fs) != 0 {
				t.Fatalf("locks left out of a truncated heartbeat:%s", describe(fs))
			}

			// The heartbeat grows past MaxBeatBytes: the key is there, Decode
			// refuses it.
			long := strings.Repeat("x", 480)
			for i := range 600 {
				hb.Held = append(hb.Held, fleet.HeldLock{Key: fmt.Sprintf("lock:%s:%d", long, i), Backend: backend, Since: time.Now()})
			}
			hb.Truncated = false
			big, err := json.Marshal(hb)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fleet.Decode(big); err == nil {
				t.Fatalf("a heartbeat of %d bytes decodes: the test needs one over %d", len(big), fleet.MaxBeatBytes)
			}
			putRaw(t, ctx, client, hb.Instance, big)
			for _, f := range detect(t, ctx, d) {
				if f.Kind == detectors.KindHolderDead {
					t.Errorf("the process's heartbeat key is there (%d bytes, over MaxBeatBytes): %s %s: %s", len(big), f.Kind, f.Key, f.Detail)
				}
			}

			// The key is gone: now the holder is dead.
			delBeat(t, ctx, client, hb.Instance)
			if got := byKey(detect(t, ctx, d), detectors.KindHolderDead); len(got) != 2 {
				t.Errorf("holder_dead on %v once the heartbeat is gone, want lock:bulk:1 and lock:bulk:2", got)
			}
		})
	}
}

// putRaw writes data as instance's heartbeat key, as a publisher would
// (under a TTL on Redis, a lease on etcd), whatever it holds.
func putRaw(t testing.TB, ctx context.Context, s any, instance string, data []byte) {
	t.Helper()
	putRawTTL(t, ctx, s, instance, data, true)
}

// putRawTTL is putRaw, or, with ttl false, the key without a TTL or lease,
// which no publisher writes.
func putRawTTL(t testing.TB, ctx context.Context, s any, instance string, data []byte, ttl bool) {
	t.Helper()
	switch c := s.(type) {
	case redis.UniversalClient:
		exp := time.Minute
		if !ttl {
			exp = 0
		}
		if err := c.Set(ctx, fleet.RedisKey(instance), data, exp).Err(); err != nil {
			t.Fatal(err)
		}
	case *clientv3.Client:
		var opts []clientv3.OpOption
		if ttl {
			lease, err := c.Grant(ctx, 60)
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		if _, err := c.Put(ctx, fleet.EtcdKey(instance), string(data), opts...); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("putRaw: %T", s)
	}
}

// heldOnBackend starts a store of backend ("redis" or "etcd") holding key
// under value (a redislock value; on etcd its JSON, in etcdlock's layout
// under a lease), for a minute, and returns the store and its client.
func heldOnBackend(t *testing.T, ctx context.Context, backend, key, value string) (detectors.Store, any) {
	t.Helper()
	if backend == "redis" {
		c := newRedis(t)
		if err := c.Set(ctx, key, value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		return redisStore(t, c), c
	}
	c := newEtcd(t)
	grant, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	entry := etcdlock.DefaultPrefix + key + "\x00" + fmt.Sprintf("%016x", int64(grant.ID))
	if _, err := c.Put(ctx, entry, value[strings.Index(value, "{"):], clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	return etcdStore(t, c), c
}

// An unreadable heartbeat key proves alive only the process that wrote it:
// when its value names a host and pid (JSON too large to decode, as an
// older publisher wrote), only that process, not a dead one that went by
// the same instance name; and a key without a TTL, which no publisher
// writes, proves nothing, however long it stays.
func TestLocks_AnUnreadableHeartbeatKeyProvesOnlyItsOwnProcessAlive(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"redis", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			ctx := timeout(t, time.Minute)
			s, client := heldOnBackend(t, ctx, backend, "lock:old", deadValue("checkout", 10))
			// "checkout" (host-checkout, pid 10) holds lock:old and beats.
			old := otherBeat("checkout", 10)
			old.Held = []fleet.HeldLock{{Key: "lock:old", Backend: backend, Since: time.Now()}}
			putBeat(t, ctx, client, old)
			d, err := detectors.NewLocks(s)
			if err != nil {
				t.Fatal(err)
			}
			if fs := detect(t, ctx, d); len(fs) != 0 {
				t.Fatalf("the live process's lock:%s", describe(fs))
			}

			// It dies; a new process takes its instance name on another host
			// and writes a heartbeat too large to decode.
			reborn := otherBeat("checkout", 20)
			reborn.Host = "host-new"
			long := strings.Repeat("x", 480)
			for i := range 600 {
				reborn.Held = append(reborn.Held, fleet.HeldLock{Key: fmt.Sprintf("lock:%s:%d", long, i), Backend: backend, Since: time.Now()})
			}
			big, err := json.Marshal(reborn)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fleet.Decode(big); err == nil {
				t.Fatalf("a heartbeat of %d bytes decodes: the test needs one over %d", len(big), fleet.MaxBeatBytes)
			}
			putRaw(t, ctx, client, "checkout", big)
			if got := byKey(detect(t, ctx, d), detectors.KindHolderDead); len(got) != 1 || got["lock:old"].Key == "" {
				t.Errorf("holder_dead on %v, want lock:old: the unreadable key is another process's (host-new, pid 20)", slices.Collect(maps.Keys(got)))
			}

			// A damaged key that names no process: alive by the name, while
			// it is under a TTL...
			putRaw(t, ctx, client, "checkout", []byte("{junk"))
			if got := byKey(detect(t, ctx, d), detectors.KindHolderDead); len(got) != 0 {
				t.Errorf("holder_dead on %v while an unreadable key of the instance is under a TTL", slices.Collect(maps.Keys(got)))
			}
			// ... and no proof of anything without one.
			putRawTTL(t, ctx, client, "checkout", []byte("{junk"), false)
			if got := byKey(detect(t, ctx, d), detectors.KindHolderDead); len(got) != 1 || got["lock:old"].Key == "" {
				t.Errorf("holder_dead on %v, want lock:old: a heartbeat key without a TTL proves nothing", slices.Collect(maps.Keys(got)))
			}
		})
	}
}

// A heartbeat key without a TTL proves nothing, whether or not it decodes:
// a dead process's last beat that lost its TTL (PERSIST, a copy of the
// keys that dropped TTLs; on etcd the beat put without a lease) must not
// keep its locks from holder_dead for ever. The same beat made too large to
// decode is no proof without a TTL already.
func TestLocks_AHeartbeatKeyWithoutATTLProvesNothingEvenWhenItDecodes(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"redis", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			ctx := timeout(t, time.Minute)
			s, client := heldOnBackend(t, ctx, backend, "lock:old", deadValue("checkout", 10))
			// "checkout" (host-checkout, pid 10) holds lock:old and beats.
			hb := otherBeat("checkout", 10)
			hb.Held = []fleet.HeldLock{{Key: "lock:old", Backend: backend, Since: time.Now()}}
			putBeat(t, ctx, client, hb)
			d, err := detectors.NewLocks(s)
			if err != nil {
				t.Fatal(err)
			}
			if fs := detect(t, ctx, d); len(fs) != 0 {
				t.Fatalf("the live process's lock:%s", describe(fs))
			}

			// It dies; its last beat stays, without a TTL.
			data, err := fleet.Encode(hb)
			if err != nil {
				t.Fatal(err)
			}
			putRawTTL(t, ctx, client, "checkout", data, false)
			if got := byKey(detect(t, ctx, d), detectors.KindHolderDead); len(got) != 1 || got["lock:old"].Key == "" {
				t.Errorf("holder_dead on %v, want lock:old: its process's heartbeat key has no TTL, which no publisher writes", slices.Collect(maps.Keys(got)))
			}
		})
	}
}

// A store that cannot be read makes Detect fail, as a partial read of the
// heartbeats would make live holders look dead. The TTL of a heartbeat key
// is a read of the heartbeats too: when it fails while the value is read
// (here the agent's ACL loses PTTL on the heartbeat keys, so that the PTTL
// fails in the pipeline whose GET succeeds), the key must not be taken for
// one without a TTL, and its live process's lock reported holder_dead.
func TestLocks_AHeartbeatTTLThatCannotBeReadIsNoMissingTTL(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	r := testenv.NewRedis(t, testenv.WithRedisACLUser("agent", "agent-secret", "~*", "+@all"))
	direct := r.Client(t)
	c := redis.NewClient(r.ClientOptions("agent", "agent-secret"))
	t.Cleanup(func() { _ = c.Close() })

	// "bulky" (host-bulky, pid 9) holds lock:bulk:1 and beats; then its
	// beat grows past MaxBeatBytes (as an older publisher wrote it), under
	// its TTL: the process is alive.
	if err := direct.Set(ctx, "lock:bulk:1", deadValue("bulky", 9), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	hb := otherBeat("bulky", 9)
	hb.Held = []fleet.HeldLock{{Key: "lock:bulk:1", Backend: "redis", Since: time.Now()}}
	putBeat(t, ctx, direct, hb)
	d, err := detectors.NewLocks(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if fs := detect(t, ctx, d); len(fs) != 0 {
		t.Fatalf("the live process's lock:%s", describe(fs))
	}
	long := strings.Repeat("x", 480)
	for i := range 600 {
		hb.Held = append(hb.Held, fleet.HeldLock{Key: fmt.Sprintf("lock:%s:%d", long, i), Backend: "redis", Since: time.Now()})
	}
	big, err := json.Marshal(hb)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, ctx, direct, hb.Instance, big)
	if fs := detect(t, ctx, d); len(fs) != 0 {
		t.Fatalf("the live process with an unreadable beat under a TTL:%s", describe(fs))
	}

	// The agent's PTTL is refused on the heartbeat keys, not on the locks.
	if err := direct.Do(ctx, "ACL", "SETUSER", "agent", "-pttl", "(+pttl ~lock:*)").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PTTL(ctx, fleet.RedisKey(hb.Instance)).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("PTTL of the heartbeat key: %v, want NOPERM", err)
	}
	fs, err := d.Detect(ctx)
	if err != nil {
		return // the read failed, and said so: no finding from it
	}
	for _, f := range fs {
		if f.Kind == detectors.KindHolderDead {
			t.Errorf("Detect succeeded with %s %s (%s) though the heartbeat key's TTL could not be read: its process is alive", f.Kind, f.Key, f.Detail)
		}
	}
}
