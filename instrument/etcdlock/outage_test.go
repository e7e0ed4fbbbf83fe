package etcdlock_test

import (
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestGovern_AWaiterThatFailedInAnEtcdOutageGivesItsEntryBackOnceEtcdIsBack:
// another process holds the lock (TTL 1 min, which outlives the outage) and
// this process waits behind it, its entry on a lease of 10 min. etcd is
// stopped for longer than the request timeout: the waiter's Acquire fails
// with a store failure (FailClosed) or falls back to a process-local lock
// (FailOpen). etcd is restarted on the same data: every lease is back, and
// the leader gives each its whole TTL again, the waiter's entry included,
// which now stands ahead of everyone who queues later. Once etcd answers,
// the entry must be given back (revoked), so that a third process queued
// behind it takes the lock when the holder releases, not ten minutes later.
func TestGovern_AWaiterThatFailedInAnEtcdOutageGivesItsEntryBackOnceEtcdIsBack(t *testing.T) {
	t.Parallel()
	for _, policy := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			e := testenv.NewEtcd(t)
			holderLocker := newLocker(t, e.Client(t))
			l := newLocker(t, e.Client(t), etcdlock.WithRequestTimeout(shortRequests))
			g := governEtcd(t, l, policy)
			const key = "lock:outage:waiter"
			holder := mustAcquire(t, holderLocker, key, instrument.WithTTL(time.Minute))
			got := acquireInBackground(t, g, key, callerTime, instrument.WithTTL(10*time.Minute))
			waitWatching(t, l, 1)
			admin := e.Client(t)
			waiterLease := newestEntry(t, admin, l, key, 2).Lease

			e.Stop()
			r := waitAcquired(t, got, callerTime, "the waiter in an etcd outage")
			if policy == instrument.FailClosed {
				if r.err == nil {
					_ = r.lease.Release(bounded(time.Second))
				}
				storeError(t, timeout(t, time.Minute), r.err, "the waiter in an etcd outage")
			} else {
				mustRelease(t, degradedLease(t, r, "the waiter in an etcd outage"))
			}
			if err := e.Restart(); err != nil {
				t.Fatal(err)
			}
			waitReachable(t, admin)

			third := newLocker(t, admin)
			theirs := acquireInBackground(t, third, key, time.Minute, instrument.WithTTL(time.Minute))
			waitWatching(t, third, 1)
			mustRelease(t, holder)
			r = waitAcquired(t, theirs, callerTime, "a waiter behind the entry of a waiter that failed in the outage")
			if r.err != nil {
				t.Fatalf("a waiter behind the entry of a waiter that failed in the outage: %v", r.err)
			}
			if !leaseGone(t, admin, waiterLease) {
				t.Error("another process got the lock while the failed waiter's lease was live")
			}
			mustRelease(t, r.lease)
			// This process's next Acquire goes to etcd again.
			again, err := g.Acquire(timeout(t, callerTime), key, instrument.WithTTL(time.Minute), instrument.FailFast())
			if err != nil || again.Fence() == 0 {
				t.Fatalf("Acquire once etcd is back: %v, %v; want a lease from etcd", again, err)
			}
			mustRelease(t, again)
		})
	}
}

// TestGovern_AWaiterKeepsItsPlaceThroughAnEtcdRestartShorterThanTheRequestTimeout:
// another process holds the lock, this process waits behind it (FailOpen,
// a request timeout of a minute) and a third process waits behind this one
// (the same request timeout).
// etcd is stopped and restarted on the same data, well within the request
// timeout. The outage is no store failure to this waiter: it neither falls
// back to a process-local lock nor gives up its place, and it does not
// queue again either (a new entry would stand behind the third process's):
// when the holder releases, it takes the lock with the entry it queued
// before the outage (fence = that entry's create revision) while the third
// process still waits, and the third gets it after.
func TestGovern_AWaiterKeepsItsPlaceThroughAnEtcdRestartShorterThanTheRequestTimeout(t *testing.T) {
	t.Parallel()
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := testenv.NewEtcd(t)
			admin := e.Client(t)
			holderLocker := newLocker(t, e.Client(t))
			// Stopping etcd takes seconds (its graceful stop waits for the
			// watch streams), longer than the default request timeout.
			long := etcdlock.WithRequestTimeout(time.Minute)
			l := inWaitMode(newLocker(t, e.Client(t), long), mode.max)
			g := governEtcd(t, l, instrument.FailOpen)
			third := inWaitMode(newLocker(t, e.Client(t), long), mode.max)
			const key = "lock:outage:short-restart"
			ttl := instrument.WithTTL(time.Minute)
			holder := mustAcquire(t, holderLocker, key, ttl)
			ours := acquireInBackground(t, g, key, 3*time.Minute, ttl, busyPolls)
			waitWatching(t, l, 1)
			ourEntry := newestEntry(t, admin, l, key, 2)
			theirs := acquireInBackground(t, third, key, 3*time.Minute, ttl, busyPolls)
			waitWatching(t, third, 1)
			newestEntry(t, admin, l, key, 3)

			e.Stop()
			if err := e.Restart(); err != nil {
				t.Fatal(err)
			}
			waitReachable(t, admin)
			stillWaiting(t, "behind the holder across the restart", ours, theirs)
			mustRelease(t, holder)
			r := waitAcquired(t, ours, 2*time.Minute, "the first waiter after the restart")
			if r.err != nil {
				t.Fatalf("the first waiter after the restart: %v", r.err)
			}
			if f := r.lease.Fence(); f != uint64(ourEntry.CreateRevision) {
				t.Errorf("the first waiter's fence %d, want %d, its entry's from before the restart (0: it fell back; more: it queued again)", f, ourEntry.CreateRevision)
			}
			stillWaiting(t, "behind the first waiter", theirs)
			if n := g.degraded(t); n != 0 {
				t.Errorf("degraded = %v across a restart shorter than the request timeout, want 0", n)
			}
			mustRelease(t, r.lease)
			r2 := waitAcquired(t, theirs, 2*time.Minute, "the second waiter")
			if r2.err != nil {
				t.Fatalf("the second waiter: %v", r2.err)
			}
			if r2.lease.Fence() <= r.lease.Fence() {
				t.Errorf("the second waiter's fence %d, not above the first's %d", r2.lease.Fence(), r.lease.Fence())
			}
			mustRelease(t, r2.lease)
		})
	}
}

// busyPolls makes a waiter read the queue every 50 ms, so that reads are
// in flight whenever etcd stops or comes back.
var busyPolls = instrument.WithPollInterval(50 * time.Millisecond)
