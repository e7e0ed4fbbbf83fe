package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// compactingWatcher makes a watch on one key (the queue prefix) start behind
// a compaction, as a watch on a member that lagged behind a compaction does:
// it compacts the store to its current revision and asks for the revision
// before it, so etcd cancels the watch with ErrCompacted. Other watches pass.
type compactingWatcher struct {
	clientv3.Watcher
	c         *clientv3.Client
	key       string
	compacted atomic.Int64 // watches etcd cancelled for compaction
}

func (w *compactingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if key != w.key {
		return w.Watcher.Watch(ctx, key, opts...)
	}
	resp, err := w.c.Get(ctx, "compact-probe", clientv3.WithKeysOnly())
	if err != nil {
		return w.Watcher.Watch(ctx, key, opts...)
	}
	rev := resp.Header.Revision
	if _, err := w.c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return w.Watcher.Watch(ctx, key, opts...)
	}
	in := w.Watcher.Watch(ctx, key, append(opts, clientv3.WithRev(rev-1))...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			if wr.CompactRevision != 0 {
				w.compacted.Add(1)
			}
			select {
			case out <- wr:
			case <-ctx.Done():
			}
		}
	}()
	return out
}

// A waiter watching the whole queue whose watch etcd cancels for compaction
// falls back to watching its predecessor: it must take the lock once, after
// the holder releases, never while the holder or the waiter ahead of it
// holds it, in queue order.
func TestAttack_QueueWatchCompactedFallsBackWithoutATakeoverWhileHeld(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	lh := newLocker(t, admin)
	const key = "compacted-queue-watch"
	wc := e.Client(t)
	cw := &compactingWatcher{Watcher: wc.Watcher, c: admin, key: lh.QueuePrefix(key)}
	wc.Watcher = cw
	lw := newLocker(t, wc)

	h, err := lh.Acquire(timeout(t, 5*time.Second), key, instrument.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// A long poll: the handoff must come from the fallback's watch.
	acquire := func() <-chan acquired { return acquireInBackground(t, lw, key, 30*time.Second, watchOnly...) }
	got1 := acquire()
	for queueLen(t, admin, lh, key) != 2 || cw.compacted.Load() < 1 {
		time.Sleep(2 * time.Millisecond)
	}
	got2 := acquire()
	for queueLen(t, admin, lh, key) != 3 || cw.compacted.Load() < 2 {
		time.Sleep(2 * time.Millisecond)
	}
	if n := etcdlock.QueueWatches(lw); n != 2 {
		t.Fatalf("%d waits watched the whole queue, want 2", n)
	}
	// Compact once more, to the current revision, while both wait on their
	// fallback watches.
	rev, err := admin.Put(timeout(t, 5*time.Second), "compact-probe", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Compact(timeout(t, 5*time.Second), rev.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got1:
		t.Fatalf("first waiter returned while the lock was held (err %v)", r.err)
	case r := <-got2:
		t.Fatalf("second waiter returned while the lock was held (err %v)", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := h.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	var w1 instrument.Lease
	select {
	case r := <-got1:
		if r.err != nil {
			t.Fatalf("first waiter after the release: %v", r.err)
		}
		w1 = r.lease
	case r := <-got2:
		t.Fatalf("second waiter took the lock ahead of the first (err %v)", r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("first waiter still waits 20 s after the release (poll interval 1 h)")
	}
	if w1.Fence() <= h.Fence() {
		t.Fatalf("fence %d not above the released holder's %d", w1.Fence(), h.Fence())
	}
	select {
	case r := <-got2:
		t.Fatalf("second waiter returned while the first holds the lock (err %v)", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := context.Cause(w1.Context()); err != nil {
		t.Fatalf("first waiter's lease ended: %v", err)
	}
	if err := w1.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got2:
		if r.err != nil {
			t.Fatalf("second waiter after the release: %v", r.err)
		}
		if r.lease.Fence() <= w1.Fence() {
			t.Fatalf("fence %d not above the released holder's %d", r.lease.Fence(), w1.Fence())
		}
		if err := r.lease.Release(timeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("second waiter still waits 20 s after the release (poll interval 1 h)")
	}
}

// An operator deletes the whole queue in one revision while a holder holds
// and two waiters wait. No waiter may come out holding an entry that no
// longer exists: it fails with ErrLockLost, or (at worst) returns a lease
// that ends with ErrLockLost. The holder's lease ends with ErrLockLost. The
// waiters' own-entry watches are held back, so those watching the whole
// queue must learn of it from that stream.
func TestAttack_QueueDeletedInOneRevisionGivesNoWaiterTheLock(t *testing.T) {
	t.Parallel()
	for _, mode := range waitModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := testenv.NewEtcd(t)
			admin := e.Client(t)
			lh := newLocker(t, admin)
			const key = "queue-deleted"
			wc := e.Client(t)
			if mode.max != 0 {
				gate := &gatedWatcher{Watcher: wc.Watcher, pass: func(k string) bool { return k == lh.QueuePrefix(key) }, open: make(chan struct{})}
				defer close(gate.open)
				wc.Watcher = gate
			}
			lw := inWaitMode(newLocker(t, wc), mode.max)

			h, err := lh.Acquire(timeout(t, 5*time.Second), key, instrument.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			const waiters = 2
			var gots []<-chan acquired
			for i := range waiters {
				gots = append(gots, acquireInBackground(t, lw, key, 30*time.Second, watchOnly...))
				for queueLen(t, admin, lh, key) != int64(i+2) {
					time.Sleep(2 * time.Millisecond)
				}
			}
			// Delete once both waits have their watches in place, so that
			// the deletion reaches their streams (the verdict holds whenever
			// it lands; this makes the watch the path it takes).
			waitWatching(t, lw, waiters)
			del, err := admin.Delete(timeout(t, 5*time.Second), lh.QueuePrefix(key), clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if del.Deleted != waiters+1 {
				t.Fatalf("deleted %d entries, want %d", del.Deleted, waiters+1)
			}
			for _, got := range gots {
				select {
				case r := <-got:
					if r.err == nil {
						// Reported as acquired: it must at least be lost at once.
						select {
						case <-r.lease.Context().Done():
						case <-time.After(10 * time.Second):
							t.Fatalf("a waiter got the lock (fence %d) for an entry deleted at revision %d and its lease did not end", r.lease.Fence(), del.Header.Revision)
						}
						t.Errorf("a waiter reported the lock acquired (fence %d) for an entry deleted at revision %d; lease ended with %v", r.lease.Fence(), del.Header.Revision, context.Cause(r.lease.Context()))
						continue
					}
					if !errors.Is(r.err, instrument.ErrLockLost) {
						t.Errorf("waiter: %v, want ErrLockLost", r.err)
					} else if mode.max != 0 && !strings.Contains(r.err.Error(), "queue entry deleted while waiting") {
						// Own-entry watches are held back: the wait itself must see it.
						t.Errorf("waiter: %v, want ErrLockLost from the wait itself", r.err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("a waiter still waits 20 s after its entry was deleted (poll 1 h, TTL 30 s)")
				}
			}
			select {
			case <-h.Context().Done():
				if err := context.Cause(h.Context()); !errors.Is(err, instrument.ErrLockLost) {
					t.Fatalf("holder's lease ended with %v, want ErrLockLost", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("holder's lease still live 10 s after its entry was deleted")
			}
			if err := h.Release(timeout(t, 5*time.Second)); !errors.Is(err, instrument.ErrNotHeld) {
				t.Fatalf("holder's Release after the deletion: %v, want ErrNotHeld", err)
			}
			// The lock is free again.
			n, err := lh.Acquire(timeout(t, 5*time.Second), key, instrument.FailFast())
			if err != nil {
				t.Fatalf("acquire after the queue was deleted: %v", err)
			}
			if n.Fence() <= uint64(del.Header.Revision) {
				t.Fatalf("fence %d not above the deletion's revision %d", n.Fence(), del.Header.Revision)
			}
			if err := n.Release(timeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A waiter whose lease is revoked (its process paused past its TTL) just
// before the holder releases, with its watches served by a follower that
// applies both a little after the leader, must not get the lock; the waiter
// behind it must.
func TestAttack_ThreeMemberCluster_RevokedWaiterOnLaggingFollowerDoesNotGetTheLock(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("3-member cluster in -short")
	}
	cl := testenv.NewEtcdCluster(t, 3)
	leader, err := cl.Leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	follower := (leader + 1) % 3
	admin := testenv.NewEtcdClient(t, cl.Members[leader].Endpoint())
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			key := "revoked-waiter-" + mode.name
			lh := newLocker(t, admin)
			newWaiter := func() *etcdlock.Locker {
				c := testenv.NewEtcdClient(t, cl.Members[leader].Endpoint())
				c.Watcher = testenv.NewEtcdClient(t, cl.Members[follower].Endpoint()).Watcher
				return inWaitMode(newLocker(t, c), mode.max)
			}
			lw, l3 := newWaiter(), newWaiter()
			for round := range 5 {
				h, err := lh.Acquire(timeout(t, 5*time.Second), key, instrument.WithTTL(30*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				got := acquireInBackground(t, lw, key, 30*time.Second, watchOnly...)
				waiter := newestEntry(t, admin, lw, key, 2)
				got3 := acquireInBackground(t, l3, key, 30*time.Second, watchOnly...)
				newestEntry(t, admin, l3, key, 3)
				// Revoke once both waits watch (on the follower).
				waitWatching(t, lw, int64(round+1))
				waitWatching(t, l3, int64(round+1))
				if _, err := admin.Revoke(timeout(t, 5*time.Second), clientv3.LeaseID(waiter.Lease)); err != nil {
					t.Fatal(err)
				}
				if err := h.Release(timeout(t, 5*time.Second)); err != nil {
					t.Fatal(err)
				}
				select {
				case r := <-got:
					if r.err == nil {
						_ = r.lease.Release(timeout(t, 5*time.Second))
						t.Fatalf("round %d: a waiter whose lease was revoked got the lock (fence %d)", round, r.lease.Fence())
					}
					if !errors.Is(r.err, instrument.ErrLockLost) && !errors.Is(r.err, instrument.ErrNotAcquired) {
						t.Fatalf("round %d: revoked waiter: %v, want ErrLockLost", round, r.err)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("round %d: revoked waiter still waits 20 s on", round)
				}
				select {
				case r := <-got3:
					if r.err != nil {
						t.Fatalf("round %d: third waiter: %v", round, r.err)
					}
					if r.lease.Fence() <= h.Fence() {
						t.Fatalf("round %d: fence %d not above the released holder's %d", round, r.lease.Fence(), h.Fence())
					}
					if err := r.lease.Release(timeout(t, 5*time.Second)); err != nil {
						t.Fatal(err)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("round %d: third waiter still waits 20 s after the release", round)
				}
			}
		})
	}
}

// Many contenders, a third of whose waits give up after a short random
// deadline: holders never overlap, fences strictly increase, every give-up
// is ErrNotAcquired, and the queue ends empty.
func TestAttack_ContendersGivingUpAtRandomNeverMakeTwoHolders(t *testing.T) {
	t.Parallel()
	for _, mode := range waitModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			c := testenv.NewEtcd(t).Client(t)
			const key, workers, total = "random-give-ups", 10, 300
			lockers := make([]*etcdlock.Locker, 3)
			for i := range lockers {
				lockers[i] = inWaitMode(newLocker(t, c), mode.max)
			}
			var (
				left   atomic.Int64
				sole   soleHolder
				took   atomic.Int64
				gaveUp atomic.Int64
				wg     sync.WaitGroup
			)
			left.Store(total)
			for w := range workers {
				l := lockers[w%len(lockers)]
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						d := 20 * time.Second
						if rand.IntN(3) == 0 {
							d = time.Duration(1+rand.IntN(30)) * time.Millisecond
						}
						ctx, cancel := context.WithTimeout(context.Background(), d)
						lease, err := l.Acquire(ctx, key, instrument.WithTTL(10*time.Second))
						cancel()
						if err != nil {
							// Whichever request the deadline ends (grant,
							// queue, re-check; etcd may answer it with its
							// own "request timed out"): ErrNotAcquired with
							// the context's cause.
							if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
								t.Errorf("Acquire: %v", err)
								return
							}
							gaveUp.Add(1)
							continue
						}
						took.Add(1)
						sole.enter(t, lease)
						if rand.IntN(2) == 0 {
							time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
						}
						if err := context.Cause(lease.Context()); err != nil {
							t.Errorf("lease ended while held: %v", err)
						}
						sole.leave()
						if err := lease.Release(timeout(t, 5*time.Second)); err != nil {
							t.Errorf("Release: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%d acquired, %d gave up", took.Load(), gaveUp.Load())
			if took.Load() == 0 {
				t.Fatal("nobody acquired")
			}
			for _, l := range lockers {
				waitRevokesDone(t, l)
			}
			if n := queueLen(t, c, lockers[0], key); n != 0 {
				t.Fatalf("%d entries left in the queue", n)
			}
		})
	}
}

// etcdServerDeadline answers a request whose deadline has passed as an etcd
// server does when the deadline sent with a request passes during its
// proposal: "etcdserver: request timed out", which etcd's client does not
// retry for a transaction and does not turn into the context's error. A
// lease grant goes through without the deadline: the deadline passes
// after it, during the requests that take the lock.
func etcdServerDeadline(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == "/etcdserverpb.Lease/LeaseGrant" {
		return invoker(context.WithoutCancel(ctx), method, req, reply, cc, opts...)
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return rpctypes.ErrGRPCTimeout
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// TestAttack_ADeadlinePassedBeforeItsTimerFiredIsAGiveUp: etcd answers a
// request whose deadline passed on the server with its own "request timed
// out", and on a loaded machine that answer can come before the timer that
// ends the caller's context has fired (CI saw it: a give-up reported as a
// store error). Whatever request it ends, the caller gets ErrNotAcquired
// with DeadlineExceeded, as for any give-up, and nothing stays in the queue.
func TestAttack_ADeadlinePassedBeforeItsTimerFiredIsAGiveUp(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	c := interceptedClient(t, e.Endpoints(), etcdServerDeadline)
	s, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	mutexes, err := etcdlock.FromMutex(s, "/mutex/")
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, c)
	holder, err := l.Acquire(timeout(t, 10*time.Second), "held", instrument.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Release(timeout(t, 5*time.Second)) })
	for _, locker := range []struct {
		name string
		l    instrument.Locker
	}{{"Locker", l}, {"FromMutex", mutexes}} {
		for _, key := range []string{"free", "held"} {
			for _, w := range []struct {
				name string
				opt  instrument.AcquireOption
			}{{"deadline", instrument.WithTTL(10 * time.Second)}, {"fail-fast", instrument.FailFast()}, {"retry", instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 3)}} {
				if m, ok := locker.l.(*etcdlock.MutexLocker); ok {
					// The previous attempt's give-up may still be deleting its
					// Mutex key in the background, keeping the key's
					// in-process turn (see MutexLocker), and a FailFast or
					// Retry attempt that finds the turn taken makes no request
					// at all. On a loaded machine (-parallel 4 and a CPU
					// burner) that delete outlasted the step to the next
					// attempt: each attempt starts with the turn free.
					testenv.WaitFor(t, 30*time.Second, "the previous attempt's cleanup to give "+key+"'s turn back", func() bool {
						return !etcdlock.TurnHeld(m, key)
					})
				}
				ctx := testenv.DeadlinePassed(t, timeout(t, time.Minute), time.Minute)
				lease, err := locker.l.Acquire(ctx, key, w.opt)
				if err == nil {
					_ = lease.Release(timeout(t, 5*time.Second))
					t.Fatalf("%s, %s key, %s: acquired past the deadline", locker.name, key, w.name)
				}
				if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s, %s key, %s: %v, want ErrNotAcquired with DeadlineExceeded", locker.name, key, w.name, err)
				}
			}
		}
	}
	if n := queueLen(t, c, l, "free"); n != 0 {
		t.Fatalf("%d entries left in the free key's queue", n)
	}
	if n := queueLen(t, c, l, "held"); n != 1 {
		t.Fatalf("%d entries in the held key's queue, want the holder's only", n)
	}
}

// failingReads fails the read-only transactions (a waiter's re-check of the
// queue) with "no leader" while on, as a member that lost its leader does,
// and counts them, and those that went through (passed).
type failingReads struct {
	on     atomic.Bool
	failed atomic.Int64
	passed atomic.Int64
}

func (f *failingReads) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	tr, ok := req.(*etcdserverpb.TxnRequest)
	if !ok || len(tr.Success) != 0 {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if f.on.Load() {
		f.failed.Add(1)
		return rpctypes.ErrGRPCNoLeader
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil {
		f.passed.Add(1)
	}
	return err
}

// A waiter whose read of the queue fails (no leader, a lost connection)
// keeps its place and reads again at the next poll: it gets the lock when
// the holder releases, in both wait modes, instead of returning the
// transport error while its deadline is still far.
func TestAcquire_AWaiterKeepsItsPlaceWhenAQueueReadFails(t *testing.T) {
	t.Parallel()
	readsFailWhileQueued(t, "read-fails-", nil, func(t *testing.T, _ context.Context, got <-chan acquired, h instrument.Lease, f *failingReads) {
		deadline := time.Now().Add(10 * time.Second)
		for f.failed.Load() < 3 {
			select {
			case r := <-got:
				t.Fatalf("the waiter returned while the lock was held (reads failing): %v", r.err)
			case <-time.After(5 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("no read of the queue failed in 10s")
			}
		}
		f.on.Store(false)
		if err := h.Release(timeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			if r.err != nil {
				t.Fatalf("after %d failed reads of the queue: %v", f.failed.Load(), r.err)
			}
			if r.lease.Fence() <= h.Fence() {
				t.Errorf("fence %d after the holder's %d", r.lease.Fence(), h.Fence())
			}
			_ = r.lease.Release(timeout(t, 5*time.Second))
		case <-time.After(20 * time.Second):
			t.Fatal("the waiter did not get the lock 20s after the release")
		}
	})
}

// readsFailWhileQueued runs, in each of the first two wait modes (a
// subtest each), an Acquire of key (prefix and the mode's name, with a
// context of callerTime and a poll every 20 ms) by a waiter on a client of
// its own (waiterOnOwnClient, the Locker made with opts) behind a holder,
// h; once the waiter watches its queue, its client's reads of the queue
// fail (f.on), and check gets the Acquire's context and outcome.
func readsFailWhileQueued(t *testing.T, prefix string, opts []etcdlock.Option,
	check func(t *testing.T, ctx context.Context, got <-chan acquired, h instrument.Lease, f *failingReads)) {
	t.Helper()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			var f failingReads
			key := prefix + mode.name
			_, _, lw, h := waiterOnOwnClient(t, e, admin, mode.max, key, &f, opts...)
			ctx := timeout(t, callerTime)
			got := make(chan acquired, 1)
			go func() {
				lease, err := lw.Acquire(ctx, key, instrument.WithPollInterval(20*time.Millisecond))
				got <- acquired{lease, err}
			}()
			waitWatching(t, lw, 1)
			f.on.Store(true)
			check(t, ctx, got, h, &f)
		})
	}
}

// waiterOnOwnClient sets up a waiter whose client fails under it: a client
// of e of its own (its unary calls through f's interceptor, if f is set),
// closed when the test ends, a Locker lw on it in wait mode max, made with
// opts, and key held (h) by another Locker, lh, on admin.
func waiterOnOwnClient(t *testing.T, e *testenv.Etcd, admin *clientv3.Client, max int64, key string, f *failingReads, opts ...etcdlock.Option) (c *clientv3.Client, lh, lw *etcdlock.Locker, h instrument.Lease) {
	t.Helper()
	pass := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if f != nil {
		pass = f.intercept
	}
	c = interceptedClient(t, e.Endpoints(), pass)
	lh, lw = newLocker(t, admin), inWaitMode(newLocker(t, c, opts...), max)
	h = mustAcquire(t, lh, key)
	return c, lh, lw, h
}

// A waiter whose client is closed under it stops waiting at once, with an
// error, in both wait modes: no read can get through any more, so it must
// not keep its place until its deadline.
func TestAcquire_AWaiterWhoseClientIsClosedStopsWaiting(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			key := "client-closed-" + mode.name
			c, _, lw, h := waiterOnOwnClient(t, e, admin, mode.max, key, nil)
			defer func() { _ = h.Release(timeout(t, 5*time.Second)) }()
			got := acquireInBackground(t, lw, key, 60*time.Second, instrument.WithPollInterval(20*time.Millisecond))
			waitWatching(t, lw, 1)
			_ = c.Close()
			// It stops at once: before, clientv3 retried each request for
			// seconds ("client connection is closing") and the waiter
			// returned about 4.6 s after the Close.
			select {
			case r := <-got:
				if r.err == nil {
					_ = r.lease.Release(timeout(t, 5*time.Second))
					t.Fatal("the waiter got the lock through a closed client while it was held")
				}
				if !errors.Is(r.err, instrument.ErrNotAcquired) || !errors.Is(r.err, etcdlock.ErrClientClosed) {
					t.Errorf("the waiter's error %q, want ErrNotAcquired saying the client was closed", r.err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the waiter was still waiting 15s after its client was closed")
			}
		})
	}
}

// A waiter whose read of the queue fails right at the holder's release (no
// leader for a moment) must still take the lock once reads work again: the
// release is its turn, and the poll is only a fallback (doc.go). Both wait
// modes read again only at the next event or poll, and the release was the
// last event: a waiter watching its predecessor sees no further event on the
// deleted entry, and a waiter watching the whole queue whose first read
// failed skips every deletion until a read succeeds. With a long poll the
// lock stays free, and everyone queued behind the waiter stays queued, until
// the waiter's deadline.
func TestAcquire_AWaiterWhoseReadFailsAtTheReleaseTakesTheLockOnceReadsWork(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			var f failingReads
			key := "read-fails-at-release-" + mode.name
			_, lh, lw, h := waiterOnOwnClient(t, e, admin, mode.max, key, &f)
			f.on.Store(true)
			got := acquireInBackground(t, lw, key, 20*time.Second, watchOnly...)
			for queueLen(t, admin, lh, key) != 2 {
				time.Sleep(2 * time.Millisecond)
			}
			if err := h.Release(timeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			// The waiter's read after the release (or its first read of
			// the queue) fails; then reads work again.
			deadline := time.Now().Add(10 * time.Second)
			for f.failed.Load() < 1 {
				if time.Now().After(deadline) {
					t.Fatal("no read of the queue failed in 10s")
				}
				time.Sleep(2 * time.Millisecond)
			}
			f.on.Store(false)
			select {
			case r := <-got:
				if r.err != nil {
					t.Fatalf("the waiter gave up with the lock free since its release: %v", r.err)
				}
				if r.lease.Fence() <= h.Fence() {
					t.Errorf("fence %d after the holder's %d", r.lease.Fence(), h.Fence())
				}
				_ = r.lease.Release(timeout(t, 5*time.Second))
			case <-time.After(15 * time.Second):
				t.Fatalf("the waiter still waits 15s after reads work again, the lock free since the release (%d reads failed; poll interval 1 h)", f.failed.Load())
			}
		})
	}
}

// A waiter that gives up at its deadline names the failed read of the queue
// that may have kept it from its turn, but only if reads still failed then:
// after a read that worked, an outage long over is not why it gave up, and
// naming it would send an operator after the wrong cause.
func TestAcquire_ADeadlineNamesAFailedReadOnlyIfReadsStillFail(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	for _, mode := range waitModes[:2] {
		for _, stillFailing := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/still-failing=%t", mode.name, stillFailing), func(t *testing.T) {
				var f failingReads
				key := fmt.Sprintf("deadline-names-read-%s-%t", mode.name, stillFailing)
				_, _, lw, h := waiterOnOwnClient(t, e, admin, mode.max, key, &f)
				defer func() { _ = h.Release(timeout(t, 5*time.Second)) }()
				got := acquireInBackground(t, lw, key, 3*time.Second, instrument.WithPollInterval(20*time.Millisecond))
				waitWatching(t, lw, 1)
				// Both happen within a few polls, long before the deadline.
				deadline := time.Now().Add(2 * time.Second)
				f.on.Store(true)
				for f.failed.Load() < 1 {
					if time.Now().After(deadline) {
						t.Fatal("no read of the queue failed in 2s")
					}
					time.Sleep(2 * time.Millisecond)
				}
				if !stillFailing {
					f.on.Store(false)
					for passed := f.passed.Load(); f.passed.Load() == passed; {
						if time.Now().After(deadline) {
							t.Fatal("no read of the queue worked in 2s after reads failed")
						}
						time.Sleep(2 * time.Millisecond)
					}
				}
				r := <-got
				if r.err == nil {
					_ = r.lease.Release(timeout(t, 5*time.Second))
					t.Fatal("the waiter got the lock while it was held")
				}
				if !errors.Is(r.err, instrument.ErrNotAcquired) || !errors.Is(r.err, context.DeadlineExceeded) {
					t.Fatalf("%v, want ErrNotAcquired with DeadlineExceeded", r.err)
				}
				if named := strings.Contains(r.err.Error(), rpctypes.ErrNoLeader.Error()); named != stillFailing {
					t.Errorf("%v: names the failed read %t, want %t", r.err, named, stillFailing)
				}
			})
		}
	}
}

// A waiter whose context ends while a read of the queue fails returns
// ErrNotAcquired wrapping the context's cause, in both wait modes, as any
// waiter whose context ended does, never the read's bare transport error:
// the caller matches a give-up with errors.Is, whichever request its end
// cut short.
func TestAcquire_AWaiterWhoseContextEndsAsAReadFailsGetsErrNotAcquiredWithTheCause(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	cause := errors.New("caller gone")
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(timeout(t, 30*time.Second))
			defer cancel(nil)
			var armed atomic.Bool
			// The read fails and the caller's context ends before the
			// waiter sees the failure.
			endingRead := func(rctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if tr, ok := req.(*etcdserverpb.TxnRequest); ok && len(tr.Success) == 0 && armed.Load() {
					cancel(cause)
					return rpctypes.ErrGRPCNoLeader
				}
				return invoker(rctx, method, req, reply, cc, opts...)
			}
			c := interceptedClient(t, e.Endpoints(), endingRead)
			lh, lw := newLocker(t, admin), inWaitMode(newLocker(t, c), mode.max)
			key := "ctx-ends-as-read-fails-" + mode.name
			h, err := lh.Acquire(timeout(t, 5*time.Second), key)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = h.Release(timeout(t, 5*time.Second)) }()
			got := make(chan acquired, 1)
			go func() {
				lease, err := lw.Acquire(ctx, key, instrument.WithPollInterval(20*time.Millisecond))
				got <- acquired{lease, err}
			}()
			waitWatching(t, lw, 1)
			armed.Store(true)
			select {
			case r := <-got:
				if r.err == nil {
					_ = r.lease.Release(timeout(t, 5*time.Second))
					t.Fatal("the waiter got the lock while it was held")
				}
				if !errors.Is(r.err, instrument.ErrNotAcquired) || !errors.Is(r.err, cause) {
					t.Fatalf("%v, want ErrNotAcquired wrapping the context's cause", r.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter still waits 10s after its context ended")
			}
			waitRevokesDone(t, lw)
			if n := queueLen(t, admin, lh, key); n != 1 {
				t.Errorf("%d entries in the queue, want the holder's only", n)
			}
		})
	}
}
