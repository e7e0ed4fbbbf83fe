package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestAcquire_AWaiterWhoseLeaseEndsWhileEtcdIsUnreachableStopsThen: a
// waiter has queued behind a holder when etcd becomes unreachable (the
// connection goes half-open right after its put), so etcd never confirms
// the watch it asks for next. Its caller's context is a minute long, its
// lease's TTL 1 s: keepalives cannot get through, the lease passes its
// local deadline, and etcd expires it (and the entry with it). The package
// says such a waiter stops waiting with ErrLockLost; waiting on for the
// watch until the caller's context ends would hold the caller for nothing
// (its place in the queue is gone), and end with a misleading error.
func TestAcquire_AWaiterWhoseLeaseEndsWhileEtcdIsUnreachableStopsThen(t *testing.T) {
	t.Parallel()
	queuedWhenCut(t, "lease-ends-unreachable/", "the waiter's entry to go (its lease expired)",
		nil, []instrument.AcquireOption{instrument.WithTTL(time.Hour)},
		func(t *testing.T, l *etcdlock.Locker, key string, cut *cutAfter) {
			got := acquireInBackground(t, l, key, time.Minute, instrument.WithTTL(time.Second))
			waitClosed(t, cut.done, 10*time.Second, "the waiter's put")
			// The lease's TTL is 1 s; the caller's context a minute.
			r := waitAcquired(t, got, 20*time.Second, "the waiter whose lease ended while etcd was unreachable")
			if r.err == nil {
				_ = r.lease.Release(timeout(t, 10*time.Second))
				t.Fatal("the waiter got the lock while it was held")
			}
			if !errors.Is(r.err, instrument.ErrLockLost) {
				t.Errorf("waiter whose lease ended: %v, want ErrLockLost", r.err)
			}
		})
}

// putBarrier lets every put transaction through to etcd but holds its reply
// back until n of them have been applied; then cut runs (a proxy's
// HalfOpen) and all the replies come back at once. Every waiter has then
// queued, and none has had a watch confirmed.
type putBarrier struct {
	n    int64
	cut  func()
	seen atomic.Int64
	all  chan struct{}
}

func (b *putBarrier) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !putTxn(method, req) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	err := invoker(context.WithoutCancel(ctx), method, req, reply, cc, opts...)
	if b.seen.Add(1) == b.n {
		b.cut()
		close(b.all)
	}
	<-b.all
	return err
}

// TestAcquire_HundredsOfWaitersGivingUpAtOnceWhileEtcdIsUnreachableLeaveNothingRunning:
// 200 waiters of one Locker have queued behind a holder when etcd becomes
// unreachable, before etcd confirmed any of their watches, and their
// callers' contexts end together. Each leaves an entry to the background
// revoker and a watch goroutine that waits up to 2 s for a confirmation
// that cannot come. What they leave running must be bounded while etcd is
// still unreachable (goroutines back to about where they were: no watch
// goroutine, lease core, own-key watch or inline revoke per waiter left),
// one revoke in flight at a time; once etcd is reachable every entry must
// go (TTL 1 h) and the lock be free after the holder releases.
func TestAcquire_HundredsOfWaitersGivingUpAtOnceWhileEtcdIsUnreachableLeaveNothingRunning(t *testing.T) {
	// Serial: it counts the process's goroutines (runtime.NumGoroutine).
	const waiters = 200
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	other := newLocker(t, admin)
	const key = "burst-of-give-ups"
	holder := mustAcquire(t, other, key, instrument.WithTTL(time.Hour))
	p := testenv.NewProxy(t, strings.TrimPrefix(e.Endpoint(), "http://"))
	b := &putBarrier{n: waiters, cut: p.HalfOpen, all: make(chan struct{})}
	g := newRevokeGate()
	c := interceptedClient(t, []string{"http://" + p.Addr()}, b.intercept, grpc.WithChainUnaryInterceptor(g.intercept))
	l := newLocker(t, c)
	waitReachable(t, c)
	before := runtime.NumGoroutine()

	ctx, cancel := context.WithCancel(timeout(t, time.Minute))
	defer cancel()
	got := make(chan acquired, waiters)
	for range waiters {
		go func() {
			lease, err := l.Acquire(ctx, key, instrument.WithTTL(time.Hour))
			got <- acquired{lease, err}
		}()
	}
	waitClosed(t, b.all, 30*time.Second, "every waiter's put")
	ended := time.Now()
	cancel()
	for i := range waiters {
		gaveUp(t, waitAcquired(t, got, 30*time.Second, fmt.Sprintf("waiter %d of %d whose context ended", i+1, waiters)), "a waiter")
	}
	t.Logf("the last of %d waiters returned %s after their context ended", waiters, time.Since(ended))
	if n := etcdlock.RevokesPending(l); n == 0 || n > waiters {
		t.Fatalf("%d revokes pending after %d give-ups with etcd unreachable: the fault did not hold", n, waiters)
	}
	if m, _ := g.counts(); m > waiters {
		t.Errorf("%d revokes in flight at once", m)
	}
	// From here on only the background revoker revokes: one at a time.
	g.reset()
	// Still unreachable: what the give-ups leave running is the revoker
	// and the client's own machinery, not a goroutine per waiter.
	const slack = 40
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("goroutines to come back to about %d (a watch goroutine ends 2 s after its waiter left)", before), func() bool {
		return runtime.NumGoroutine() <= before+slack
	})
	t.Logf("goroutines: %d before the waiters, %d once they were gone", before, runtime.NumGoroutine())
	if m, _ := g.counts(); m > 1 {
		t.Errorf("%d background revokes in flight at once, want 1", m)
	}
	if n := queueLen(t, admin, other, key); n != waiters+1 {
		t.Fatalf("%d entries in the queue while etcd was unreachable, want the holder's and %d waiters'", n, waiters)
	}

	p.Reset() // the client reconnects
	waitRevokesDone(t, l)
	if n := queueLen(t, admin, other, key); n != 1 {
		t.Fatalf("%d entries in the queue once the revokes were done, want the holder's only", n)
	}
	mustRelease(t, holder)
	lockIsFree(t, key, other, l)
}

// TestAcquire_AGhostsLeaseIsNeverReusedAndItsLateRevokeEndsNoLiveLock: a
// waiter on a pooled lease gives up while revokes cannot get through, so
// its entry (the ghost) stands on that lease until the background revoker
// gets through. The lease may carry the entry: were it pooled again, a
// later Acquire of another key could run on it, and the revoke, once it
// got through, would delete that holder's entry under it (a live lock
// ended by somebody else's cleanup). While the revoke is pending, the same
// Locker takes and releases locks on other keys and holds one; none may
// run on the ghost's lease, and the revoke must leave the held one alone.
func TestAcquire_AGhostsLeaseIsNeverReusedAndItsLateRevokeEndsNoLiveLock(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	l, g := gatedLocker(t, e.Endpoints())
	other := newLocker(t, admin)
	ttl := instrument.WithTTL(time.Hour)
	entryLease := func(key string) int64 { return newestEntry(t, admin, l, key, 1).Lease }

	warm := mustAcquire(t, l, "ghost-lease/warm", ttl)
	pooled := entryLease("ghost-lease/warm")
	mustRelease(t, warm)
	const key = "ghost-lease/contended"
	holder := mustAcquire(t, other, key, ttl)
	ghost := leaveGhost(t, admin, l, g, key, 2)
	if ghost.Lease != pooled {
		t.Fatalf("the waiter ran on lease %x, not on the pooled %x: the test does not attack what it means to", ghost.Lease, pooled)
	}
	if etcdlock.RevokesPending(l) != 1 || leaseGone(t, admin, ghost.Lease) {
		t.Fatal("the ghost's revoke got through although revokes were held back: the fault did not hold")
	}

	// More locks than the pool holds, released and held, while the ghost's
	// revoke is pending.
	for i := range 20 {
		k := fmt.Sprintf("ghost-lease/other-%d", i)
		h := mustAcquire(t, l, k, ttl)
		if id := entryLease(k); id == ghost.Lease {
			t.Fatalf("a later Acquire of %q runs on the ghost's lease %x", k, id)
		}
		if i%4 == 0 {
			defer func() {
				if err := h.Release(timeout(t, 10*time.Second)); err != nil {
					t.Errorf("Release of %q, held while the ghost's revoke got through: %v", k, err)
				}
			}()
			continue
		}
		mustRelease(t, h)
	}
	live := mustAcquire(t, l, "ghost-lease/live", ttl)
	if id := entryLease("ghost-lease/live"); id == ghost.Lease {
		t.Fatalf("a later Acquire runs on the ghost's lease %x", id)
	}

	g.let()
	waitRevokesDone(t, l)
	if !leaseGone(t, admin, ghost.Lease) {
		t.Fatal("the revoker is done but the ghost's lease stands")
	}
	if n := queueLen(t, admin, l, key); n != 1 {
		t.Fatalf("%d entries in the contended queue, want the holder's only", n)
	}
	if err := context.Cause(live.Context()); err != nil {
		t.Fatalf("a lock held while the ghost's revoke got through was lost: %v", err)
	}
	if n := queueLen(t, admin, l, "ghost-lease/live"); n != 1 {
		t.Fatal("the live holder's entry is gone")
	}
	mustRelease(t, live)
	mustRelease(t, holder)
	lockIsFree(t, key, other, l)
}

// TestFromMutex_ATurnKeptForAMutexLockThatDoesNotReturnIsBoundedByTheSession:
// the adapter's waiting Acquire has put this session's Mutex key behind
// another session's when the connection goes half-open, and its caller's
// context ends. concurrency.Mutex.Lock then deletes its key on the client's
// context, which nothing ends while the connection stays half-open, and
// the adapter keeps the key's in-process turn until it returns. Later
// Acquires of the key in the same process must not hang on that turn
// beyond their own context (FailFast refused at once, a waiting one ending
// at its deadline), and the turn must come back when the session ends,
// however it ends (Orphan, Close, or its lease lapsing on the client side
// while etcd cannot be reached), not only once etcd answers.
func TestFromMutex_ATurnKeptForAMutexLockThatDoesNotReturnIsBoundedByTheSession(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	otherSession := newSession(t, admin, 600)
	for _, tc := range []struct {
		name string
		ttl  int
		end  func(s *concurrency.Session)
	}{
		{"orphaned", 600, func(s *concurrency.Session) { s.Orphan() }},
		// Close revokes on a half-open connection: only its first step,
		// the end of the keepalive, is needed.
		{"closed", 600, func(s *concurrency.Session) { go s.Close() }},
		{"lapsed", 2, func(*concurrency.Session) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := "/turn-bounded/" + tc.name + "/"
			const key = "k"
			c, p, cut := halfOpenAfterPut(t, e)
			s := newSession(t, c, tc.ttl)
			t.Cleanup(p.Reset) // before the session's Close
			m, other := fromMutex(t, s, pfx), fromMutex(t, otherSession, pfx)
			holder := mustAcquire(t, other, key)
			defer holder.Release(timeout(t, 10*time.Second))
			gaveUp(t, giveUpWhenCut(t, cut, "the adapter's Acquire whose context ended", m, key), "the adapter's Acquire")
			if s.Ctx().Err() == nil { // a session of 2 s may have lapsed already on a loaded machine
				if !etcdlock.TurnHeld(m, key) {
					t.Fatal("the turn came back although Mutex.Lock may still delete this session's key: the fault did not hold")
				}
				if h, err := m.Acquire(timeout(t, 10*time.Second), key, instrument.FailFast()); err == nil {
					_ = h.Release(timeout(t, 10*time.Second))
					t.Fatal("FailFast took the key while the turn was kept")
				} else if !errors.Is(err, instrument.ErrNotAcquired) {
					t.Errorf("FailFast while the turn was kept: %v, want ErrNotAcquired", err)
				}
				waiting := acquireInBackground(t, m, key, 200*time.Millisecond)
				if r := waitAcquired(t, waiting, 30*time.Second, "a waiting Acquire of the kept turn whose deadline passed"); r.err == nil {
					_ = r.lease.Release(timeout(t, 10*time.Second))
					t.Fatal("a waiting Acquire took the key while the turn was kept")
				} else if !errors.Is(r.err, instrument.ErrNotAcquired) || !errors.Is(r.err, context.DeadlineExceeded) {
					t.Errorf("a waiting Acquire of the kept turn: %v, want ErrNotAcquired with DeadlineExceeded", r.err)
				}
			}
			tc.end(s)
			waitClosed(t, s.Ctx().Done(), 30*time.Second, "the session to end")
			testenv.WaitFor(t, 10*time.Second, "the key's turn to come back once the session ended", func() bool {
				return !etcdlock.TurnHeld(m, key)
			})
		})
	}
}

// TestAttack_GhostsOfAPartitionedMemberSurviveALeaderChangeAndACompactionWithoutAHandoff:
// three waiters of a Locker whose client talks to one member of a
// three-member cluster give up after that member was partitioned from the
// others: their entries (the ghosts) stand on leases only the background
// revoker gives up. On the majority meanwhile, two waiters of other Lockers
// queue behind them, the leadership moves, the store is compacted and the
// holder releases. Nobody may take the lock while a ghost stands (a
// FailFast caller is refused and neither waiter returns); once the
// partition heals, the ghosts go and the two waiters take the lock in the
// order they queued, each only once every ghost's lease is gone, fences
// increasing, and the queue ends empty.
func TestAttack_GhostsOfAPartitionedMemberSurviveALeaderChangeAndACompactionWithoutAHandoff(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("3-member cluster in -short")
	}
	cl := testenv.NewEtcdClusterWithPeerProxies(t, 3)
	leader, err := cl.Leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The partitioned member is a follower when the test starts; the
	// majority is the two others.
	cut, a, b := (leader+1)%3, leader, (leader+2)%3
	maj := testenv.NewEtcdClient(t, cl.Members[a].Endpoint(), cl.Members[b].Endpoint())
	lg, g := gatedLocker(t, cl.Members[cut].Endpoints())
	la, lb, lc := newLocker(t, maj), newLocker(t, maj), newLocker(t, maj)
	const key, ghosts = "ghosts-partitioned", 3
	ttl := instrument.WithTTL(time.Hour)

	holder := mustAcquire(t, la, key, ttl)
	var gots []<-chan acquired
	var cancels []context.CancelFunc
	var ghostLeases []int64
	for i := range ghosts {
		got, cancel := acquireCancellable(t, lg, key, ttl)
		gots, cancels = append(gots, got), append(cancels, cancel)
		ghostLeases = append(ghostLeases, newestEntry(t, maj, lg, key, int64(2+i)).Lease)
	}
	waitWatching(t, lg, ghosts)

	cl.Isolate(cut, true)
	g.shut.Store(true) // a revoke that got through the partition's first moments would not make a ghost
	for _, cancel := range cancels {
		cancel()
	}
	for _, got := range gots {
		gaveUp(t, returnedAtCallersEnd(t, got, "a waiter of the partitioned member whose context ended"), "a waiter of the partitioned member")
	}
	for _, id := range ghostLeases {
		if leaseGone(t, maj, id) {
			t.Fatal("a ghost's lease is gone although its member was partitioned: the fault did not hold")
		}
	}

	first := acquireInBackground(t, lb, key, 2*time.Minute, ttl)
	waitWatching(t, lb, 1)
	second := acquireInBackground(t, lc, key, 2*time.Minute, ttl)
	waitWatching(t, lc, 1)

	// The leadership moves within the majority (to whichever member is not
	// the leader then: a loaded machine may have held an election since),
	// the store is compacted, the holder releases.
	ids := map[string]uint64{}
	ml, err := maj.MemberList(timeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		ids[m.Name] = m.ID
	}
	pinned := map[int]*clientv3.Client{a: testenv.NewEtcdClient(t, cl.Members[a].Endpoint()), b: testenv.NewEtcdClient(t, cl.Members[b].Endpoint())}
	testenv.WaitFor(t, 30*time.Second, "the leadership to move within the majority", func() bool {
		for i, c := range pinned {
			if cl.Members[i].IsLeader() {
				_, err := c.MoveLeader(timeout(t, 10*time.Second), ids[cl.Members[a+b-i].Name()])
				return err == nil
			}
		}
		return false
	})
	rev, err := maj.Get(timeout(t, 10*time.Second), "compact-here")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := maj.Compact(timeout(t, 10*time.Second), rev.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, holder)
	if h, err := newLocker(t, maj).Acquire(timeout(t, 10*time.Second), key, ttl, instrument.FailFast()); err == nil {
		_ = h.Release(timeout(t, 10*time.Second))
		t.Fatal("FailFast took the lock while the ghosts stood")
	}
	// Give the waiters a background revoke's worth of time to go wrong.
	g.waitFailed(t)
	stillWaiting(t, "behind the ghosts", first, second)

	cl.Isolate(cut, false)
	g.let()
	takenInOrder(t, maj, holder.Fence(), first, second, ghostLeases...)
	waitRevokesDone(t, lg)
	if n := queueLen(t, maj, la, key); n != 0 {
		t.Fatalf("%d entries left in the queue", n)
	}
}
