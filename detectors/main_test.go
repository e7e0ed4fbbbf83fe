package detectors_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/lockvalue"
	"github.com/lockgov/lockgov/internal/leakcheck"
	"github.com/lockgov/lockgov/internal/testenv"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

func timeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newRedis(t testing.TB) *redis.Client {
	t.Helper()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, PoolSize: 16})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl := testenv.NewRedisCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: 3})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	return testenv.NewEtcd(t).Client(t)
}

func redisStore(t testing.TB, c redis.UniversalClient, opts ...detectors.StoreOption) detectors.Store {
	t.Helper()
	s, err := detectors.NewRedisStore(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func etcdStore(t testing.TB, c *clientv3.Client, opts ...detectors.StoreOption) detectors.Store {
	t.Helper()
	s, err := detectors.NewEtcdStore(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// selfBeat is a heartbeat of this test process (its host and pid are what
// the lock values this process writes carry).
func selfBeat(instance string) *fleet.Heartbeat {
	host, _ := os.Hostname()
	now := time.Now()
	return &fleet.Heartbeat{Instance: instance, Service: "test", Host: host, PID: os.Getpid(),
		StartedAt: now, SentAt: now, Interval: fleet.DefaultPeriod}
}

// otherBeat is a heartbeat of a simulated process on another host.
func otherBeat(instance string, pid int) *fleet.Heartbeat {
	now := time.Now()
	return &fleet.Heartbeat{Instance: instance, Service: "svc", Host: "host-" + instance, PID: pid,
		StartedAt: now, SentAt: now, Interval: fleet.DefaultPeriod}
}

// putBeat writes hb the way the publisher does: into the store, under a TTL.
func putBeat(t testing.TB, ctx context.Context, s any, hb *fleet.Heartbeat) {
	t.Helper()
	b, err := fleet.Encode(hb)
	if err != nil {
		t.Fatal(err)
	}
	switch c := s.(type) {
	case redis.UniversalClient:
		if err := c.Set(ctx, fleet.RedisKey(hb.Instance), b, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	case *clientv3.Client:
		lease, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, fleet.EtcdKey(hb.Instance), string(b), clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("putBeat: %T", s)
	}
}

func delBeat(t testing.TB, ctx context.Context, s any, instance string) {
	t.Helper()
	switch c := s.(type) {
	case redis.UniversalClient:
		if err := c.Del(ctx, fleet.RedisKey(instance)).Err(); err != nil {
			t.Fatal(err)
		}
	case *clientv3.Client:
		if _, err := c.Delete(ctx, fleet.EtcdKey(instance)); err != nil {
			t.Fatal(err)
		}
	}
}

func detect(t testing.TB, ctx context.Context, d detectors.Detector) []detectors.Finding {
	t.Helper()
	fs, err := d.Detect(ctx)
	if err != nil {
		t.Fatalf("%s.Detect: %v", d.Name(), err)
	}
	for _, f := range fs {
		if f.Detector != d.Name() || f.Kind == "" || f.Severity == "" || f.Action == "" || f.Detail == "" {
			t.Errorf("incomplete finding: %+v", f)
		}
	}
	return fs
}

// byKey returns the findings of kind, keyed by Key.
func byKey(fs []detectors.Finding, kind string) map[string]detectors.Finding {
	m := map[string]detectors.Finding{}
	for _, f := range fs {
		if f.Kind == kind {
			m[f.Key] = f
		}
	}
	return m
}

func describe(fs []detectors.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString("\n  " + f.Kind + " " + f.Key + ": " + f.Detail)
	}
	return b.String()
}

// liveValue is a lock value of this process in redislock's framing
// ("<token> <fence> <json>"), its JSON written by lockvalue.Writer as
// redislock writes it.
func liveValue() string {
	w, err := lockvalue.NewWriter("test", "")
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	b.WriteString("tok 7 ")
	w.Begin(&b, lockvalue.Call{TTL: 30 * time.Second})
	lockvalue.AppendTime(&b, lockvalue.AcquiredAt, time.Now())
	b.WriteString(lockvalue.FenceMember + "7}")
	return b.String()
}
