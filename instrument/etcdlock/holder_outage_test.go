package etcdlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/instrument/fence/etcdfence"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/testenv"
)

// keepAlives records the lease keepalives a client sends, by lease ID, and
// whether any was sent for a lease after it was marked lost.
type keepAlives struct {
	mu    sync.Mutex
	lost  map[int64]bool
	after map[int64]int // keepalives of a lease sent after it was marked lost
}

// markLost says lease id has ended for its holder: a keepalive of it from
// now on re-extends a lease nobody holds.
func (k *keepAlives) markLost(id int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lost == nil {
		k.lost, k.after = map[int64]bool{}, map[int64]int{}
	}
	k.lost[id] = true
}

func (k *keepAlives) sentAfterLoss(id int64) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.after[id]
}

func (k *keepAlives) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != "/etcdserverpb.Lease/LeaseKeepAlive" {
		return s, err
	}
	return keepAliveStream{s, k}, nil
}

type keepAliveStream struct {
	grpc.ClientStream
	k *keepAlives
}

func (s keepAliveStream) SendMsg(m any) error {
	if r, ok := m.(*etcdserverpb.LeaseKeepAliveRequest); ok {
		s.k.mu.Lock()
		if s.k.lost[r.ID] {
			s.k.after[r.ID]++
		}
		s.k.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

// keepAliveClient returns a client of endpoints whose lease keepalives k
// records, closed when the test ends.
func keepAliveClient(t *testing.T, endpoints []string, k *keepAlives) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(k.stream)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// governWithHeartbeat governs l under FailOpen with the process's
// heartbeat on etcd (every 200 ms): what a service runs.
func governWithHeartbeat(t *testing.T, l instrument.Locker) *instrument.Governed {
	t.Helper()
	g, err := instrument.NewGoverned(l, instrument.WithStoreFailure(instrument.FailOpen),
		instrument.WithLogger(slog.New(slog.DiscardHandler)),
		instrument.WithHeartbeat(fleet.WithInterval(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// lostLockChecks is what must hold once a governed holder (lease, on
// holderClient) has lost its lock in an outage and etcd is reachable for
// everyone again: its context ended with ErrLockLost, another process
// takes the lock with a higher fence, the old holder's guarded writes are
// refused, no keepalive of its lease was sent after the loss, and its
// Release says it did not hold the lock and leaves the new holder alone.
func lostLockChecks(t *testing.T, admin *clientv3.Client, l *etcdlock.Locker, lease instrument.Lease, guard *etcdfence.Guard, k *keepAlives, leaseID int64) {
	t.Helper()
	other := newLocker(t, admin)
	r := waitAcquired(t, acquireInBackground(t, other, lease.Key(), time.Minute, instrument.WithTTL(time.Minute)),
		callerTime, "another process after the holder lost the lock")
	if r.err != nil {
		t.Fatalf("another process after the holder lost the lock: %v", r.err)
	}
	defer mustRelease(t, r.lease)
	if r.lease.Fence() <= lease.Fence() {
		t.Errorf("the new holder's fence %d is not above the lost holder's %d", r.lease.Fence(), lease.Fence())
	}
	err := guard.Put(timeout(t, callerTime), "orders/1/state", "late")
	var se *fence.StaleFenceError
	if !errors.As(err, &se) {
		t.Fatalf("the lost holder's guarded write: %v, want ErrStaleFence", err)
	}
	if se.Stored != r.lease.Fence() {
		t.Errorf("the refusal names fence %d as the holder's, want the new holder's %d", se.Stored, r.lease.Fence())
	}
	if n := k.sentAfterLoss(leaseID); n != 0 {
		t.Errorf("%d keepalives of the lost holder's lease sent after its loss", n)
	}
	if err := lease.Release(timeout(t, callerTime)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Errorf("the lost holder's Release: %v, want ErrNotHeld", err)
	}
	if err := context.Cause(r.lease.Context()); err != nil {
		t.Errorf("the new holder's lease ended after the lost holder's Release: %v", err)
	}
	if n := queueLen(t, admin, l, lease.Key()); n != 1 {
		t.Errorf("%d entries in the queue, want the new holder's alone", n)
	}
}

// lostWithLockLost waits for lease's context to end and checks its cause.
func lostWithLockLost(t *testing.T, lease instrument.Lease, what string) {
	t.Helper()
	select {
	case <-lease.Context().Done():
	case <-time.After(callerTime):
		t.Fatalf("%s: the holder's context still live after %s", what, callerTime)
	}
	if err := context.Cause(lease.Context()); !errors.Is(err, instrument.ErrLockLost) {
		t.Fatalf("%s: the holder's context ended with %v, want ErrLockLost", what, err)
	}
}

// TestGovern_AHolderCutOffFromEtcdPastItsTTLLosesTheLockForGood: a governed
// holder (FailOpen, with the heartbeat on) whose connection to etcd goes
// half-open, while etcd serves everyone else, for longer than the lock's
// TTL (2 s): its keepalives never arrive and etcd expires its lease. Its
// context must end with ErrLockLost (the local deadline, before etcd's
// expiry), another process takes the lock with a higher fence, and once
// the holder reaches etcd again it does not win anything back: its
// guarded writes are refused, its watchdog sends no keepalive for the lease
// it lost, and its Release answers ErrNotHeld without touching the new
// holder's entry.
func TestGovern_AHolderCutOffFromEtcdPastItsTTLLosesTheLockForGood(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	p := testenv.NewProxy(t, strings.TrimPrefix(e.Endpoint(), "http://"))
	t.Cleanup(p.Reset)
	var k keepAlives
	c := keepAliveClient(t, []string{"http://" + p.Addr()}, &k)
	l := newLocker(t, c, etcdlock.WithRequestTimeout(shortRequests))
	g := governWithHeartbeat(t, l)
	const key = "lock:outage:holder-cut-off"
	lease, err := g.Acquire(timeout(t, callerTime), key, instrument.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	guard, err := etcdfence.For(timeout(t, callerTime), c, l, lease)
	if err != nil {
		t.Fatal(err)
	}
	if err := guard.Put(timeout(t, callerTime), "orders/1/state", "paid"); err != nil {
		t.Fatalf("the holder's guarded write before the cut: %v", err)
	}
	leaseID := newestEntry(t, admin, l, key, 1).Lease

	p.HalfOpen()
	lostWithLockLost(t, lease, "cut off from etcd past the TTL")
	k.markLost(leaseID)
	p.Reset() // the holder's client reconnects
	waitReachable(t, c)
	lostLockChecks(t, admin, l, lease, guard, &k, leaseID)
}

// TestGovern_AHolderThroughAnEtcdOutagePastItsTTLLosesTheLockForGood: etcd
// is stopped for longer than a governed holder's TTL (2 s) and restarted on
// the same data. etcd keeps leases across a restart and its new leader
// gives each its whole TTL again, so the holder's lease, and its entry,
// are there again; but the holder's context ended with ErrLockLost at its
// local deadline in the outage, and nothing of it may renew that lease:
// it runs out its TTL (or the Release revokes it), another process takes
// the lock with a higher fence, and the holder's guarded writes are
// refused.
func TestGovern_AHolderThroughAnEtcdOutagePastItsTTLLosesTheLockForGood(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	var k keepAlives
	c := keepAliveClient(t, e.Endpoints(), &k)
	l := newLocker(t, c, etcdlock.WithRequestTimeout(shortRequests))
	g := governWithHeartbeat(t, l)
	const key = "lock:outage:holder-etcd-down"
	lease, err := g.Acquire(timeout(t, callerTime), key, instrument.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	guard, err := etcdfence.For(timeout(t, callerTime), c, l, lease)
	if err != nil {
		t.Fatal(err)
	}
	leaseID := newestEntry(t, admin, l, key, 1).Lease

	e.Stop()
	lostWithLockLost(t, lease, "etcd stopped past the TTL")
	k.markLost(leaseID)
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	waitReachable(t, c)
	lostLockChecks(t, admin, l, lease, guard, &k, leaseID)
}
