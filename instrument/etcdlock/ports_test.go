package etcdlock_test

import (
	"sync"
	"testing"

	"github.com/lockgov/lockgov/internal/testenv"
)

// ports keeps the tests of this package, which run in parallel, from
// choosing a port while a member that one of them stopped waits to be
// restarted. Etcd.Restart binds the member's ports again, and a server
// start of another test (testenv.FreePort: a port that was free a moment
// ago) could have been handed one of them meanwhile: the restart then
// fails with "address already in use" (seen once in five runs with
// -parallel 4, the peer port of a killed member taken in its outage).
// Outages (outage) may overlap each other, and starts (newEtcd, newProxy,
// newEtcdCluster...) each other, but never an outage and a start. A
// waiting outage goes first: every test that stops a member has started
// its servers already, so outages cannot keep starts out for longer than
// they last. Another process choosing the port stays possible, as before.
var ports portGuard

type portGuard struct {
	mu      sync.Mutex
	cond    *sync.Cond
	starts  int // server starts under way
	outages int // members stopped and not restarted yet
	waiting int // outages waiting for the starts under way to end
}

func (g *portGuard) lock() {
	g.mu.Lock()
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
}

// start waits until no outage is under way or waiting, and returns the
// function that ends the start.
func (g *portGuard) start() (done func()) {
	g.lock()
	defer g.mu.Unlock()
	for g.outages > 0 || g.waiting > 0 {
		g.cond.Wait()
	}
	g.starts++
	return func() {
		g.lock()
		defer g.mu.Unlock()
		g.starts--
		g.cond.Broadcast()
	}
}

// outage marks the time from a member's Stop to its Restart: it waits for
// the server starts under way to end and returns end, which ends the
// outage; end is idempotent and runs at the test's end if not called.
func outage(t testing.TB) (end func()) {
	g := &ports
	g.lock()
	g.waiting++
	for g.starts > 0 {
		g.cond.Wait()
	}
	g.waiting--
	g.outages++
	g.mu.Unlock()
	var once sync.Once
	end = func() {
		once.Do(func() {
			g.lock()
			defer g.mu.Unlock()
			g.outages--
			g.cond.Broadcast()
		})
	}
	t.Cleanup(end)
	return end
}

// newEtcd is testenv.NewEtcd, as a start (see ports).
func newEtcd(t testing.TB, opts ...testenv.EtcdOption) *testenv.Etcd {
	t.Helper()
	defer ports.start()()
	return testenv.NewEtcd(t, opts...)
}

// newProxy is testenv.NewProxy, as a start (see ports).
func newProxy(t testing.TB, target string) *testenv.Proxy {
	t.Helper()
	defer ports.start()()
	return testenv.NewProxy(t, target)
}

// newEtcdCluster is testenv.NewEtcdCluster, as a start (see ports).
func newEtcdCluster(t testing.TB, n int) *testenv.EtcdCluster {
	t.Helper()
	defer ports.start()()
	return testenv.NewEtcdCluster(t, n)
}

// newEtcdClusterWithPeerProxies is testenv.NewEtcdClusterWithPeerProxies,
// as a start (see ports).
func newEtcdClusterWithPeerProxies(t testing.TB, n int) *testenv.EtcdCluster {
	t.Helper()
	defer ports.start()()
	return testenv.NewEtcdClusterWithPeerProxies(t, n)
}
