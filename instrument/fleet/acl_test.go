package fleet_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/fleet/etcdstore"
	"github.com/lockgov/lockgov/instrument/fleet/redisstore"
	"github.com/lockgov/lockgov/internal/testenv"
)

// beats is how many beats of the publisher registered on reg ended with
// result ("ok", "error").
func beats(t *testing.T, reg *prometheus.Registry, result string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lockgov_fleet_heartbeats_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// writeOnly attaches a publisher to s and checks that its beats are
// written: a service publishing heartbeats needs to write its heartbeat key
// (and read its tier report), not to read the key, and a user allowed just
// that must keep its heartbeat. Reading the beat a write replaced (SET ...
// GET, an etcd Put with its previous key-value) needs read access too:
// without it the write is made without, and no sibling is found.
func writeOnly(t *testing.T, s fleet.Store, inst string, read func() *fleet.Heartbeat) {
	t.Helper()
	reg := prometheus.NewRegistry()
	var logs syncBuffer
	a, err := fleet.Attach(s, fleet.WithInstance(inst), fleet.WithInterval(time.Second), fleet.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), fleet.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// A refused write fails every beat; one in time is not asked of each.
	eventually(t, "three beats, written or not", func() bool { return beats(t, reg, "ok")+beats(t, reg, "error") >= 3 })
	if beats(t, reg, "ok") == 0 {
		t.Fatalf("no beat written as a user allowed to write the heartbeat key but not to read it:\n%s", logs.String())
	}
	if hb := read(); hb == nil || hb.Instance != inst {
		t.Fatalf("heartbeat %+v, want one of %s", hb, inst)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if hb := read(); hb != nil {
		t.Fatalf("the publisher closed and left its heartbeat: %+v", hb)
	}
}

func TestHeartbeat_AUserThatMayOnlyWriteTheHeartbeatKeyPublishes(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		r := testenv.NewRedis(t, testenv.WithRedisACLUser("app", "app-pw",
			"%W~"+fleet.RedisPrefix+"*", "%R~"+fleet.TierRedisPrefix+"*", "-@all",
			"+set", "+del", "+get", "+time", "+ping", "+hello"))
		c := redis.NewClient(r.ClientOptions("app", "app-pw"))
		t.Cleanup(func() { _ = c.Close() })
		const inst = "write-only"
		writeOnly(t, redisstore.New(c), inst, func() *fleet.Heartbeat { return redisBeat(t, r.Client(t), inst) })
	})
	t.Run("etcd", func(t *testing.T) {
		e := testenv.NewEtcd(t, testenv.WithEtcdUser("app", "app-pw", fleet.TierEtcdPrefix))
		root := e.Client(t)
		ctx := ctxFor(t, 10*time.Second)
		if _, err := root.RoleGrantPermission(ctx, "app-role", fleet.EtcdPrefix, clientv3.GetPrefixRangeEnd(fleet.EtcdPrefix), clientv3.PermissionType(clientv3.PermWrite)); err != nil {
			t.Fatal(err)
		}
		cfg := e.ClientConfig(nil)
		cfg.Username, cfg.Password = "app", "app-pw"
		c, err := clientv3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		const inst = "write-only"
		writeOnly(t, etcdstore.New(c), inst, func() *fleet.Heartbeat { hb, _ := etcdBeat(t, root, inst); return hb })
	})
}
