package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// revokes records the lease revokes a client sends that etcd answered
// with success, by lease ID: the lease was alive until that revoke.
type revokes struct {
	mu sync.Mutex
	ok map[int64]int
}

func (r *revokes) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if rr, isRevoke := req.(*etcdserverpb.LeaseRevokeRequest); isRevoke && err == nil {
		r.mu.Lock()
		if r.ok == nil {
			r.ok = map[int64]int{}
		}
		r.ok[rr.ID]++
		r.mu.Unlock()
	}
	return err
}

func (r *revokes) succeeded(id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok[id]
}

// TestAcquire_AHolderThatLostItsLockInAnOutageRevokesItsLeaseOnceEtcdIsBack:
// a holder (TTL 2 s) whose context ends with ErrLockLost at its local
// deadline while etcd is stopped, and another process's waiter queued
// behind it. etcd, restarted on its data, gives the lost holder's lease its
// whole TTL again, and with it the holder's entry, ahead of the waiter.
// The holder must give that lease back once etcd answers, without a
// Release from its caller: the waiter then takes the lock while the lease
// would still live. A client of the test keeps the lease alive after the
// restart, standing in for a TTL longer than the test (a real holder's
// lease lives its TTL again, up to one more TTL of nobody holding the
// lock): only a revoke can end it, and the waiter waits for ever without
// one. Fences still refuse the old holder either way (holder_outage_test).
func TestAcquire_AHolderThatLostItsLockInAnOutageRevokesItsLeaseOnceEtcdIsBack(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	var rv revokes
	c := interceptedClient(t, e.Endpoints(), rv.unary)
	l := newLocker(t, c, etcdlock.WithRequestTimeout(shortRequests))
	const key = "lock:outage:lost-holder-gives-back"
	lease := mustAcquire(t, l, key, instrument.WithTTL(2*time.Second))
	leaseID := newestEntry(t, admin, l, key, 1).Lease
	// Another process waits behind the holder, through the outage: its
	// watch resumes after the restart, and nothing polls.
	other := newLocker(t, admin, etcdlock.WithRequestTimeout(time.Minute))
	got := acquireInBackground(t, other, key, time.Minute, watchOnly...)
	waitWatching(t, other, 1)

	e.Stop()
	lostWithLockLost(t, lease, "etcd stopped past the TTL")
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	keeper := testenv.NewEtcdClient(t, e.Endpoint())
	kept := false
	if ka, err := keeper.KeepAliveOnce(timeout(t, callerTime), clientv3.LeaseID(leaseID)); err == nil {
		kept = ka.TTL > 0
		if _, err := keeper.KeepAlive(timeout(t, time.Minute), clientv3.LeaseID(leaseID)); err != nil {
			t.Fatal(err)
		}
	}

	r := waitAcquired(t, got, callerTime, "the waiter behind the holder that lost the lock in the outage")
	if r.err != nil {
		t.Fatalf("the waiter behind the lost holder: %v", r.err)
	}
	defer mustRelease(t, r.lease)
	if !kept && rv.succeeded(leaseID) == 0 {
		t.Fatal("the lost lease was neither kept alive after the restart nor revoked by its holder: it expired, which proves nothing")
	}
	if r.lease.Fence() <= lease.Fence() {
		t.Errorf("the waiter's fence %d is not above the lost holder's %d", r.lease.Fence(), lease.Fence())
	}
	if err := lease.Release(timeout(t, callerTime)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Errorf("the lost holder's Release: %v, want ErrNotHeld", err)
	}
}

// TestAcquire_AHolderWhoseKeyIsDeletedRevokesItsLeaseButFromMutexKeepsItsSession:
// a lock key deleted under its holder (an operator's `etcdctl del`) ends
// the lease with ErrLockLost while etcd still has its lease (TTL 1 min).
// A Locker's lease is the Acquire's own, so the holder revokes it, and no
// lease of a lock this process lost outlives the loss by its TTL. A
// MutexLocker's lease is the caller's Session, shared by all its Mutexes
// and whatever else the caller attached to it: a lost Mutex must leave it
// alone, so the session lives on, and the next Acquire on it works once
// the lost holder has released.
func TestAcquire_AHolderWhoseKeyIsDeletedRevokesItsLeaseButFromMutexKeepsItsSession(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	c := e.Client(t)
	l := newLocker(t, c)
	s := newSession(t, c, 60)
	m := fromMutex(t, s, "/lost-mutex/")
	const key = "lock:deleted-under-holder"
	lease := mustAcquire(t, l, key, instrument.WithTTL(time.Minute))
	leaseID := newestEntry(t, admin, l, key, 1).Lease
	ml := mustAcquire(t, m, key)

	if _, err := admin.Delete(timeout(t, callerTime), l.QueuePrefix(key), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Delete(timeout(t, callerTime), "/lost-mutex/"+key, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	lostWithLockLost(t, lease, "the Locker's key deleted")
	lostWithLockLost(t, ml, "the Mutex key deleted")
	testenv.WaitFor(t, callerTime, "the lost lease to be revoked", func() bool { return leaseGone(t, admin, leaseID) })

	select {
	case <-s.Done():
		t.Fatal("the session ended when its Mutex was lost")
	default:
	}
	if leaseGone(t, admin, int64(s.Lease())) {
		t.Fatal("the session's lease was revoked when its Mutex was lost")
	}
	if err := ml.Release(timeout(t, callerTime)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Errorf("the lost Mutex holder's Release: %v, want ErrNotHeld", err)
	}
	next := mustAcquire(t, m, key)
	mustRelease(t, next)
	if err := lease.Release(timeout(t, callerTime)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Errorf("the lost holder's Release: %v, want ErrNotHeld", err)
	}
}

// TestRelease_ALossAsTheLeaseIsPooledDoesNotRevokeItUnderTheNextHolder: a
// holder's lease is lost (its expiry timer firing, say) just as its Release
// has put the lease back into the pool. The loss must not give the lease
// back to etcd: the pool hands it to the next Acquire, whose lock would end
// under it with a revoke meant for the previous holder. The next Acquire
// gets that very lease, and once the background revoker has nothing left
// to do the lease, and the new holder's entry, are still there.
func TestRelease_ALossAsTheLeaseIsPooledDoesNotRevokeItUnderTheNextHolder(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	l := newLocker(t, e.Client(t))
	const key = "lock:lost-as-pooled"
	first := mustAcquire(t, l, key, instrument.WithTTL(time.Minute))
	id := newestEntry(t, admin, l, key, 1).Lease
	lost := false
	etcdlock.SetAfterPool(l, func(lose func()) { lost = true; lose() })
	if err := first.Release(timeout(t, callerTime)); err != nil {
		t.Fatal(err)
	}
	etcdlock.SetAfterPool(l, nil)
	if !lost {
		t.Fatal("the lease was not pooled: the scenario did not happen")
	}
	next := mustAcquire(t, l, key, instrument.WithTTL(time.Minute))
	if got := newestEntry(t, admin, l, key, 1).Lease; got != id {
		t.Fatalf("the next Acquire's lease %x is not the pooled %x: the scenario did not happen", got, id)
	}
	testenv.WaitFor(t, callerTime, "the background revoker to be idle", func() bool { return etcdlock.RevokesPending(l) == 0 })
	if leaseGone(t, admin, id) {
		t.Fatal("the previous holder's loss revoked the lease the next holder acquired with")
	}
	select {
	case <-next.Context().Done():
		t.Fatalf("the next holder's lock ended: %v", context.Cause(next.Context()))
	default:
	}
	mustRelease(t, next)
}
