package agent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/testenv"
)

func TestScan_Heartbeats_BecomeInstancesAndSkewGauges(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hb := &fleet.Heartbeat{Instance: "pay-7", Service: "payments", PID: 42, SentAt: time.Now(),
		Clock:     &fleet.ClockSample{Offset: 700 * time.Millisecond, RTT: time.Millisecond},
		Tier:      "reject",
		WorkerIDs: []fleet.WorkerID{{Service: "payments", ID: 17}},
		Held: []fleet.HeldLock{{Key: "lock:order:1", Pattern: "lock:order:{id}", Backend: "redis"},
			{Key: "lock:order:2", Pattern: "lock:order:{id}", Backend: "redis", Fallback: true}}}
	data, err := fleet.Encode(hb)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, fleet.RedisKey(hb.Instance), data, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, fleet.RedisKey("garbage"), "not json", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("agent")
	cfg.Redis = []string{"redis://" + r.Addr()}
	a := start(t, cfg)
	var doc struct {
		Instances []Instance `json:"instances"`
	}
	waitFor(t, "the instance in /api/v1/instances", func() bool {
		_, body := get(t, a.URL()+"api/v1/instances")
		return json.Unmarshal([]byte(body), &doc) == nil && len(doc.Instances) > 0
	})
	got := doc.Instances[0]
	if len(doc.Instances) != 1 || got.Service != "payments" || got.HeldLocks != 2 || got.FallbackLocks != 1 || got.Tier != "reject" ||
		got.ClockOffsetSeconds == nil || *got.ClockOffsetSeconds != 0.7 || len(got.WorkerIDs) != 1 {
		t.Errorf("instances %+v", doc.Instances)
	}
	if v := metric(t, a, `lockgov_clock_skew_seconds{instance="pay-7",service="payments"}`); v != "0.7" {
		t.Errorf("lockgov_clock_skew_seconds = %q, want 0.7", v)
	}
}

// TestPublish_ADeposedLeadersRecordIsRefused holds the fencing of the
// record on Redis: a write with a smaller fence than the stored one is
// dropped, so a leader paused past its lease cannot replace its successor's.
func TestPublish_ADeposedLeadersRecordIsRefused(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	write := func(fence, body string) int {
		n, err := publishScript.Run(ctx, c, []string{redisRecordKey}, fence, fence+" "+body, 60000).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if write("99", `{"a":1}`) != 1 || write("100", `{"a":2}`) != 1 {
		t.Fatal("in-order writes refused")
	}
	if write("99", `{"a":3}`) != 0 || write("9", `{"a":4}`) != 0 {
		t.Error("a smaller fence replaced the record")
	}
	if v, _ := c.Get(ctx, redisRecordKey).Result(); !strings.HasSuffix(v, `{"a":2}`) {
		t.Errorf("record %q", v)
	}
	if write("18446744073709551615", `{"a":5}`) != 1 {
		t.Error("a larger fence (beyond 2^53) refused")
	}
}

// TestScan_AHeartbeatKeyWithoutATTLIsNoInstance: a publisher writes every
// beat under a TTL (a lease on etcd), so a heartbeat key without one (a
// PERSIST, a copy or restore that dropped TTLs, a hand-written key) proves
// no live process: the detectors ignore it already. The instances list and
// the skew gauges must too; otherwise a process gone long ago stays listed
// and its last clock offset keeps a skew alert firing for good.
func TestScan_AHeartbeatKeyWithoutATTLIsNoInstance(t *testing.T) {
	beat := func(instance string, offset time.Duration) []byte {
		data, err := fleet.Encode(&fleet.Heartbeat{Instance: instance, Service: "payments", PID: 42, SentAt: time.Now(),
			Clock: &fleet.ClockSample{Offset: offset, RTT: time.Millisecond}, Tier: "reject"})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, backend := range []string{"redis", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := testConfig("agent")
			switch backend {
			case "redis":
				r := testenv.NewRedis(t)
				c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
				defer c.Close()
				if err := c.Set(ctx, fleet.RedisKey("live-1"), beat("live-1", 700*time.Millisecond), time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				if err := c.Set(ctx, fleet.RedisKey("gone-1"), beat("gone-1", 3*time.Second), 0).Err(); err != nil {
					t.Fatal(err)
				}
				cfg.Redis = []string{"redis://" + r.Addr()}
			case "etcd":
				e := testenv.NewEtcd(t)
				c := testenv.NewEtcdClient(t, e.Endpoints()...)
				lease, err := c.Grant(ctx, 60)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Put(ctx, fleet.EtcdKey("live-1"), string(beat("live-1", 700*time.Millisecond)), clientv3.WithLease(lease.ID)); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Put(ctx, fleet.EtcdKey("gone-1"), string(beat("gone-1", 3*time.Second))); err != nil {
					t.Fatal(err)
				}
				cfg.Etcd = e.Endpoints()
			}
			a := start(t, cfg)
			var doc struct {
				Instances []Instance `json:"instances"`
			}
			waitFor(t, "the live instance in /api/v1/instances", func() bool {
				_, body := get(t, a.URL()+"api/v1/instances")
				return json.Unmarshal([]byte(body), &doc) == nil && len(doc.Instances) > 0
			})
			if len(doc.Instances) != 1 || doc.Instances[0].Instance != "live-1" {
				t.Errorf("instances %+v, want only live-1", doc.Instances)
			}
			if v := metric(t, a, `lockgov_clock_skew_seconds{instance="gone-1",service="payments"}`); v != "" {
				t.Errorf("lockgov_clock_skew_seconds of the key without a TTL = %q, want no series", v)
			}
			if v := metric(t, a, `lockgov_clock_skew_seconds{instance="live-1",service="payments"}`); v != "0.7" {
				t.Errorf("lockgov_clock_skew_seconds of live-1 = %q, want 0.7", v)
			}
		})
	}
}
