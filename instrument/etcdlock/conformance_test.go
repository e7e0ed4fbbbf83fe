package etcdlock_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/locktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// peerHTTP ignores the embedded members' peer connections: raft traffic
// between members goes over net/http (rafthttp), whose client and server
// goroutines come and go with it, in a cluster test also while the leak
// check waits (a stream or pipeline connection redialled after a slow
// heartbeat on a loaded machine). They are the server's, never the
// Locker's: etcd's client speaks gRPC, and nothing in this package uses
// net/http, so every net/http goroutine in this test binary is a member's.
var peerHTTP = []goleak.Option{
	goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
}

// runConformance runs the suite with every Locker on a client of its own.
func runConformance(t *testing.T, endpoints []string) {
	admin := testenv.NewEtcdClient(t, endpoints...)
	probe := newLocker(t, admin)
	locktest.Run(t,
		func(t *testing.T) instrument.Locker {
			return newLocker(t, testenv.NewEtcdClient(t, endpoints...))
		},
		locktest.WithExpiryTTL(time.Second),
		locktest.WithLeakOptions(peerHTTP...),
		locktest.WithLoser(func(t *testing.T, key string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := admin.Delete(ctx, probe.QueuePrefix(key), clientv3.WithPrefix()); err != nil {
				t.Fatalf("delete lock key: %v", err)
			}
		}),
	)
}

// runMutexConformance runs the suite for FromMutex, every Locker on a
// session (and client) of its own.
func runMutexConformance(t *testing.T, endpoints []string) {
	const pfx = "locktest/mutex/"
	admin := testenv.NewEtcdClient(t, endpoints...)
	locktest.Run(t,
		func(t *testing.T) instrument.Locker {
			return fromMutex(t, newSession(t, testenv.NewEtcdClient(t, endpoints...), 30), pfx)
		},
		// WithTTL and WithoutWatchdog have no effect: the session's
		// keepalive renews its Mutex keys while the process lives. The
		// loss cases delete the Mutex key instead.
		locktest.WithoutExpiry(),
		// Every handoff between sessions waits for etcd's ~100 ms resync of
		// the Mutex's unsynced watch (see MutexLocker): fewer rounds.
		locktest.WithContention(2, 10),
		locktest.WithLeakOptions(append(peerHTTP,
			// The session's keepalive stream belongs to the session, not to
			// the Locker. etcd's client opens it from a goroutine of its own
			// after NewSession has returned (and again after a stream
			// error), so on a loaded machine it can appear after the leak
			// check's baseline was taken: its client loops, the gRPC
			// stream's context watcher, and the embedded server's handler.
			goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/v3.(*lessor).sendKeepAliveLoop"),
			goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/v3.(*lessor).recvKeepAliveLoop"),
			goleak.IgnoreTopFunction("google.golang.org/grpc.newClientStreamWithParams.func4"),
			goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*LeaseServer).LeaseKeepAlive"),
			goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*LeaseServer).leaseKeepAlive"))...),
		locktest.WithLoser(func(t *testing.T, key string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// The Mutex's keys are pfx+key+"/"+<session lease>.
			if _, err := admin.Delete(ctx, pfx+key+"/", clientv3.WithPrefix()); err != nil {
				t.Fatalf("delete Mutex key: %v", err)
			}
		}),
	)
}

// The conformance tests stay serial: locktest's leak cases compare the
// process's goroutines with a baseline (goleak.IgnoreCurrent), which the
// goroutines of a test running alongside would break.
func TestConformance_FromMutex(t *testing.T) {
	e := testenv.NewEtcd(t)
	runMutexConformance(t, e.Endpoints())
}

func TestConformance_SingleMember(t *testing.T) {
	e := testenv.NewEtcd(t)
	runConformance(t, e.Endpoints())
}

func TestConformance_ThreeMemberCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("3-member cluster in -short")
	}
	c := testenv.NewEtcdCluster(t, 3)
	runConformance(t, c.Endpoints())
}

var _ = etcdlock.BackendName
