package etcdlock_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// noQuorum is a 3-member cluster with peer proxies, and a FromMutex waiter
// governed by policy, with WithRequestTimeout(bound), whose client talks to
// member 0 only, queued behind another session's holder and ahead of a
// third session's waiter (behind), which is queued once the waiter's key
// is in place. cut isolates every member from the others, so no member
// has a leader; heal ends that.
type noQuorum struct {
	cl     *testenv.EtcdCluster
	admin  *clientv3.Client
	probes *countGets
	s      *concurrency.Session // the waiter's
	g      governedEtcd
	m      *etcdlock.MutexLocker
	holder instrument.Lease
	other  *etcdlock.MutexLocker // the holder's
	got    <-chan acquired       // the waiter's
	behind <-chan acquired       // the third session's
	pfx    string
	key    string
}

func queueBehindAHolderOnACluster(t *testing.T, policy instrument.StoreFailurePolicy, bound time.Duration) *noQuorum {
	t.Helper()
	q := &noQuorum{cl: testenv.NewEtcdClusterWithPeerProxies(t, 3), probes: &countGets{}, pfx: "/mutex-no-quorum/", key: "k"}
	q.admin = q.cl.Client(t)
	c := interceptedClient(t, q.cl.Members[0].Endpoints(), q.probes.intercept)
	// Session TTLs the test never outlives: no lease may end in it.
	q.s = newSession(t, c, 600)
	m, err := etcdlock.FromMutex(q.s, q.pfx, etcdlock.WithRequestTimeout(bound))
	if err != nil {
		t.Fatal(err)
	}
	q.m = m
	q.g = governEtcd(t, m, policy)
	q.other = fromMutex(t, newSession(t, q.admin, 600), q.pfx)
	q.holder = mustAcquire(t, q.other, q.key)
	q.got = acquireInBackground(t, q.g, q.key, 2*time.Minute, instrument.WithPollInterval(50*time.Millisecond))
	testenv.WaitFor(t, 10*time.Second, "the waiter's Mutex key to queue", func() bool {
		return mutexKeys(t, q.admin, q.pfx, q.key, q.s) == 1
	})
	third := fromMutex(t, newSession(t, testenv.NewEtcdClient(t, q.cl.Members[1].Endpoint()), 600), q.pfx)
	q.behind = acquireInBackground(t, third, q.key, 2*time.Minute)
	testenv.WaitFor(t, 10*time.Second, "three Mutex keys in the queue", func() bool {
		resp, err := q.admin.Get(timeout(t, 5*time.Second), q.pfx+q.key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 3
	})
	t.Cleanup(q.heal) // before the sessions' Close, whose revokes need a leader
	return q
}

// cut isolates every member and waits until member 0, the waiter's, has no
// leader.
func (q *noQuorum) cut(t *testing.T) {
	t.Helper()
	for i := range q.cl.Members {
		q.cl.Isolate(i, true)
	}
	testenv.WaitFor(t, 30*time.Second, "member 0 to lose its leader", func() bool { return !q.cl.Members[0].HasLeader() })
}

func (q *noQuorum) heal() {
	for i := range q.cl.Members {
		q.cl.Isolate(i, false)
	}
}

// TestGovern_FromMutexKeepsItsPlaceThroughANoLeaderPhaseShorterThanTheRequestTimeout:
// a FromMutex waiter (FailOpen, request timeout 1 min, a probe every 50 ms)
// behind another session's holder, on a 3-member cluster that loses its
// quorum: no member has a leader, and the waiter's probes, linearizable
// reads, are answered Unavailable (etcd's own request timeout, 6 s here)
// while clientv3 sends them again. The phase ends, by the test, once a
// probe has been answered so, well within the request timeout: the waiter
// must keep its place in the queue, take the lock from etcd when the
// holder releases (a fence above the holder's, no degrade), ahead of the
// third session queued behind it, which gets it next with a higher fence.
func TestGovern_FromMutexKeepsItsPlaceThroughANoLeaderPhaseShorterThanTheRequestTimeout(t *testing.T) {
	t.Parallel()
	q := queueBehindAHolderOnACluster(t, instrument.FailOpen, time.Minute)
	q.cut(t)
	testenv.WaitFor(t, time.Minute, "a probe answered Unavailable without a leader", func() bool {
		return q.probes.unavailable.Load() > 0 || len(q.got) > 0
	})
	stillWaiting(t, "through a no-leader phase shorter than the request timeout", q.got, q.behind)
	q.heal()
	if _, err := q.cl.Leader(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, q.holder)
	r := acquiredAbove(t, q.got, q.holder.Fence(), "the waiter after the no-leader phase")
	stillWaiting(t, "behind the waiter that kept its place", q.behind)
	mustRelease(t, r)
	next := acquiredAbove(t, q.behind, r.Fence(), "the session queued behind the waiter")
	mustRelease(t, next)
	if n := q.g.degraded(t); n != 0 {
		t.Errorf("degraded = %v through a no-leader phase shorter than the request timeout, want 0", n)
	}
}

// TestGovern_FromMutexEndsTheWaitWithAStoreFailureWhenNoLeaderOutlastsTheRequestTimeout:
// the same waiter with a request timeout of 2 s, shorter than the phase,
// which lasts until the Acquire has returned: a probe gets no answer in
// that time (etcd's own timeout, 6 s, comes later), and the Acquire fails
// with a store failure while its caller has time (FailClosed), or
// degrades to a process-local lock (FailOpen). Once the cluster has a
// leader again, the waiter's Mutex key is deleted, and the holder's
// release goes to the session that queued behind it.
func TestGovern_FromMutexEndsTheWaitWithAStoreFailureWhenNoLeaderOutlastsTheRequestTimeout(t *testing.T) {
	t.Parallel()
	for _, policy := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			q := queueBehindAHolderOnACluster(t, policy, 2*time.Second)
			ctx := timeout(t, 2*time.Minute)
			q.cut(t)
			r := waitAcquired(t, q.got, 2*time.Minute, "the waiter in a no-leader phase longer than the request timeout")
			if policy == instrument.FailClosed {
				if r.err == nil {
					_ = r.lease.Release(bounded(time.Second))
				}
				storeError(t, ctx, r.err, "the waiter in a no-leader phase")
			} else {
				mustRelease(t, degradedLease(t, r, "the waiter in a no-leader phase"))
				if n := q.g.degraded(t); n != 1 {
					t.Errorf("degraded = %v, want 1", n)
				}
			}
			stillWaiting(t, "behind the holder in the no-leader phase", q.behind)
			q.heal()
			testenv.WaitFor(t, callerTime, "the waiter's Mutex key to be gone once there is a leader", func() bool {
				return mutexKeys(t, q.admin, q.pfx, q.key, q.s) == 0
			})
			mustRelease(t, q.holder)
			next := waitAcquired(t, q.behind, callerTime, "the session queued behind the waiter that failed")
			if next.err != nil {
				t.Fatalf("the session queued behind the waiter that failed: %v", next.err)
			}
			mustRelease(t, next.lease)
		})
	}
}

// acquiredAbove waits for got, an Acquire that must get the lock from etcd
// with a fence above fence (its predecessor's: it kept its place).
func acquiredAbove(t *testing.T, got <-chan acquired, fence uint64, what string) instrument.Lease {
	t.Helper()
	r := waitAcquired(t, got, callerTime, what)
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	if r.lease.Fence() <= fence {
		t.Errorf("%s: fence %d, want above its predecessor's %d: a lease from etcd, in queue order", what, r.lease.Fence(), fence)
	}
	return r.lease
}
