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

const etcdTTL = 2 * time.Second

func etcdClient(t *testing.T, c *clientv3.Client, resourceKey string) Client {
	raw, err := etcdlock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := instrument.NewGoverned(raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return Client{Locker: g, Resource: EtcdResource{C: c, Locker: raw, Key: resourceKey}}
}

// etcdConfig is a workload on its own lock and resource keys (the
// scenarios share one cluster), client i on endpoints[i].
func etcdConfig(t *testing.T, cluster *testenv.EtcdCluster, endpoints [][]string, readerEndpoints []string) Config {
	key := "chaos/" + t.Name()
	reader := testenv.NewEtcdClient(t, readerEndpoints...)
	cfg := Config{Key: "lock:" + key, TTL: etcdTTL, Work: etcdTTL / 40, Reader: EtcdResource{C: reader, Key: key},
		AcquireTimeout: 3 * time.Second, OpTimeout: 3 * time.Second}
	for _, eps := range endpoints {
		cfg.Clients = append(cfg.Clients, etcdClient(t, testenv.NewEtcdClient(t, eps...), key))
	}
	return cfg
}

// TestEtcd runs the etcd faults on one 3-member cluster (starting and
// stopping one costs seconds), each on keys of its own. The cluster is the
// test's own, so TestEtcd runs beside the other scenarios; its subtests run
// one after another: each one's fault (a leader stopped, a member cut off)
// is on the cluster the others use. (Three clusters side by side, one per
// subtest, took each scenario from 8 s to 25-30 s of CPU-bound run here
// and saved only seconds of the package's time.)
func TestEtcd(t *testing.T) {
	t.Parallel()
	cluster := testenv.NewEtcdClusterWithPeerProxies(t, 3)
	t.Run("LeaderKilled", func(t *testing.T) { etcdLeaderKilled(t, cluster) })
	t.Run("ClientPartitioned", func(t *testing.T) { etcdClientPartitioned(t, cluster) })
	t.Run("MemberPartitioned", func(t *testing.T) { etcdMemberPartitioned(t, cluster) })
}

func etcdLeaderKilled(t *testing.T, cluster *testenv.EtcdCluster) {
	eps := make([][]string, nClients)
	for i := range eps {
		eps[i] = cluster.Endpoints()
	}
	run(t, etcdConfig(t, cluster, eps, cluster.Endpoints()), etcdOpts, func(ctx context.Context, w *Workload, h *History) {
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

// etcdClientPartitioned: one client reaches the cluster only through
// a proxy to one member, which is blackholed for longer than the TTL: its
// lease is lost, the others take the lock over, and its writes (if any get
// through afterwards) are refused by the guard.
func etcdClientPartitioned(t *testing.T, cluster *testenv.EtcdCluster) {
	p := testenv.NewProxy(t, cluster.Members[0].Endpoint()[len("http://"):])
	eps := make([][]string, nClients)
	eps[0] = []string{"http://" + p.Addr()}
	for i := 1; i < nClients; i++ {
		eps[i] = cluster.Endpoints()
	}
	run(t, etcdConfig(t, cluster, eps, cluster.Endpoints()), etcdOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(1) {
			p.Blackhole(true)
			hold(ctx, phase(etcdTTL+time.Second))
			p.Blackhole(false)
			p.Reset() // the connection's streams carry dropped frames
		}
	})
}

// etcdMemberPartitioned: the leader is cut off from its peers (the raft
// traffic they send it is blackholed) for longer than the TTL, with one
// client pinned to it; the others elect a new leader and go on. Then it is
// healed and rejoins.
func etcdMemberPartitioned(t *testing.T, cluster *testenv.EtcdCluster) {
	leader, err := cluster.Leader(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The other clients list only the majority's members: clientv3 spreads
	// requests over its endpoints without health checks, so a client that
	// also lists the cut-off member sends it a share of its requests, which
	// hang until their deadlines (measured: the first lock after the cut
	// took 26 s with every client listing all three members).
	var majority []string
	for i, m := range cluster.Members {
		if i != leader {
			majority = append(majority, m.Endpoint())
		}
	}
	eps := make([][]string, nClients)
	eps[0] = cluster.Members[leader].Endpoints()
	for i := 1; i < nClients; i++ {
		eps[i] = majority
	}
	run(t, etcdConfig(t, cluster, eps, majority), etcdOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(1) {
			cluster.Isolate(leader, true)
			cut := time.Now()
			waitFor(t, ctx, "a new leader among the others", func() bool {
				for i, m := range cluster.Members {
					if i != leader && m.IsLeader() {
						return true
					}
				}
				return false
			})
			t.Logf("new leader after %v", time.Since(cut).Round(time.Millisecond))
			if err := w.WaitAccepted(ctx, 3); err != nil { // the majority side makes progress
				t.Fatal(err)
			}
			t.Logf("progress after %v", time.Since(cut).Round(time.Millisecond))
			hold(ctx, phase(etcdTTL))
			cluster.Isolate(leader, false)
			cutCli := testenv.NewEtcdClient(t, cluster.Members[leader].Endpoint())
			waitFor(t, ctx, "the cut-off member rejoins", func() bool {
				gctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				_, err := cutCli.Get(gctx, "x") // linearizable: needs the leader
				return err == nil
			})
		}
	})
}
