package chaos

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// etcd promises exclusion (a holder's context ends before etcd can expire
// its lease and hand the lock on) and the guard: a write applies only while
// the writer's queue entry exists.

var etcdOpts = CheckOptions{MutexPromised: true, StrictStale: false}

const (
	etcdTTL         = 2 * time.Second
	etcdResourceKey = "chaos/acct-1"
)

func etcdClient(t *testing.T, c *clientv3.Client) Client {
	raw, err := etcdlock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := instrument.NewGoverned(raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return Client{Locker: g, Resource: EtcdResource{C: c, Locker: raw, Key: etcdResourceKey}}
}

func etcdConfig(t *testing.T, cluster *testenv.EtcdCluster, endpoints [][]string) Config {
	reader := testenv.NewEtcdClient(t, cluster.Endpoints()...)
	cfg := Config{Key: lockKey, TTL: etcdTTL, Work: etcdTTL / 40, Reader: EtcdResource{C: reader, Key: etcdResourceKey},
		AcquireTimeout: 3 * time.Second, OpTimeout: 3 * time.Second}
	for _, eps := range endpoints {
		cfg.Clients = append(cfg.Clients, etcdClient(t, testenv.NewEtcdClient(t, eps...)))
	}
	return cfg
}

func TestEtcd_LeaderKilled(t *testing.T) {
	cluster := testenv.NewEtcdCluster(t, 3)
	eps := make([][]string, nClients)
	for i := range eps {
		eps[i] = cluster.Endpoints()
	}
	run(t, etcdConfig(t, cluster, eps), etcdOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(1) {
			i, err := cluster.StopLeader()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cluster.Leader(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			hold(ctx, phase(500*time.Millisecond))
			if err := cluster.Members[i].Restart(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestEtcd_ClientPartitioned: one client reaches the cluster only through
// a proxy to one member, which is blackholed for longer than the TTL: its
// lease is lost, the others take the lock over, and its writes (if any get
// through afterwards) are refused by the guard.
func TestEtcd_ClientPartitioned(t *testing.T) {
	cluster := testenv.NewEtcdCluster(t, 3)
	p := testenv.NewProxy(t, cluster.Members[0].Endpoint()[len("http://"):])
	eps := make([][]string, nClients)
	eps[0] = []string{"http://" + p.Addr()}
	for i := 1; i < nClients; i++ {
		eps[i] = cluster.Endpoints()
	}
	run(t, etcdConfig(t, cluster, eps), etcdOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(1) {
			p.Blackhole(true)
			hold(ctx, phase(etcdTTL+time.Second))
			p.Blackhole(false)
			p.Reset() // the connection's streams carry dropped frames
		}
	})
}
