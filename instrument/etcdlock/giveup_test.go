package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// ownCleanupBound is the bound of its own that the tests below give the
// cleanup a Locker or MutexLocker does for a caller (SetCleanupBound):
// longer than anything they wait for. A call whose caller's context ended
// while etcd could not be reached must return because that context ended
// (its inline cleanup cut short cleanupGrace, 100 ms, after it, the rest
// left to the background), not because its cleanup ran out of time of its
// own. With the 2 s such cleanups had before 9a3a455, which nothing but a
// clock tells from 100 ms, the call would return too, only later; with an
// hour, a call that waits for its cleanup is still waiting when the test
// gives up on it (callerLeft).
const ownCleanupBound = time.Hour

// callerLeft bounds how long a test waits for a call whose caller's context
// has ended while the call's cleanup cannot get through. It is a liveness
// bound, not a promptness one: such a call returns cleanupGrace after its
// caller's end, however loaded the machine, or, if it waits for its
// cleanup, not before ownCleanupBound has passed or etcd answers, which the
// test withholds until the call has returned.
const callerLeft = 30 * time.Second

// returnedAtCallersEnd waits for the outcome of a call, what, run in the
// background, whose caller's context has ended while etcd cannot answer
// its cleanup, for at most callerLeft.
func returnedAtCallersEnd[T any](t *testing.T, got <-chan T, what string) T {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(callerLeft):
		t.Fatalf("%s has not returned %s after its caller's context ended, etcd still unreachable: it waits for a cleanup that only etcd's answer or a bound of the cleanup's own would end", what, callerLeft)
		var zero T
		return zero
	}
}

// cutAfter is a unary client interceptor that makes etcd unreachable right
// after the next request that match selects: that request is applied
// (whatever the caller's context does meanwhile) and its reply comes back,
// then cut runs (a proxy's HalfOpen: nothing sent on the client's
// connection arrives any more) and done is closed.
type cutAfter struct {
	match func(method string, req any) bool
	cut   func()
	armed atomic.Bool
	done  chan struct{}
}

func newCutAfter(match func(method string, req any) bool, cut func()) *cutAfter {
	return &cutAfter{match: match, cut: cut, done: make(chan struct{})}
}

func (c *cutAfter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !c.match(method, req) || !c.armed.CompareAndSwap(true, false) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	err := invoker(context.WithoutCancel(ctx), method, req, reply, cc, opts...)
	c.cut()
	close(c.done)
	return err
}

// arm cuts after the next matching request.
func (c *cutAfter) arm() { c.armed.Store(true) }

// waitClosed waits up to within for ch, failing the test with what.
func waitClosed(t *testing.T, ch <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("%s: not within %s", what, within)
	}
}

// waitAcquired waits up to within for an Acquire run in the background.
func waitAcquired(t *testing.T, got <-chan acquired, within time.Duration, what string) acquired {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(within):
		t.Fatalf("%s: still waiting after %s", what, within)
		return acquired{}
	}
}

// mustAcquire takes key on l, failing the test if it cannot.
func mustAcquire(t *testing.T, l instrument.Locker, key string, opts ...instrument.AcquireOption) instrument.Lease {
	t.Helper()
	h, err := l.Acquire(timeout(t, 10*time.Second), key, opts...)
	if err != nil {
		t.Fatalf("Acquire %q: %v", key, err)
	}
	return h
}

// mustRelease releases h, failing the test if it cannot.
func mustRelease(t *testing.T, h instrument.Lease) {
	t.Helper()
	if err := h.Release(timeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Release %q: %v", h.Key(), err)
	}
}

// acquireCancellable runs l.Acquire(key) in a goroutine of its own, on a
// context that ends when the test calls cancel (or after a minute), and
// returns its outcome's channel.
func acquireCancellable(t *testing.T, l instrument.Locker, key string, opts ...instrument.AcquireOption) (<-chan acquired, context.CancelFunc) {
	ctx, cancel := context.WithCancel(timeout(t, time.Minute))
	t.Cleanup(cancel)
	got := make(chan acquired, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, opts...)
		got <- acquired{lease, err}
	}()
	return got, cancel
}

// gaveUp checks r, the outcome of what, an Acquire whose context was
// cancelled before it got the lock: ErrNotAcquired wrapping
// context.Canceled, and no lease.
func gaveUp(t *testing.T, r acquired, what string) {
	t.Helper()
	if r.err == nil {
		_ = r.lease.Release(timeout(t, 10*time.Second))
		t.Fatalf("%s got the lock (fence %d) although its context ended first", what, r.lease.Fence())
	}
	if !errors.Is(r.err, instrument.ErrNotAcquired) || !errors.Is(r.err, context.Canceled) {
		t.Errorf("%s: %v, want ErrNotAcquired with context.Canceled", what, r.err)
	}
}

// stillWaiting fails the test if an Acquire whose outcome comes on one of
// ws has returned: what says what it waits behind.
func stillWaiting(t *testing.T, what string, ws ...<-chan acquired) {
	t.Helper()
	for _, w := range ws {
		select {
		case r := <-w:
			if r.err == nil {
				_ = r.lease.Release(timeout(t, 10*time.Second))
			}
			t.Fatalf("a waiter returned while it should have waited %s (err %v)", what, r.err)
		default:
		}
	}
}

// halfOpenAfterPut returns a client of e through a fault proxy whose
// connection goes half-open right after the next put once cut is armed.
func halfOpenAfterPut(t *testing.T, e *testenv.Etcd) (*clientv3.Client, *testenv.Proxy, *cutAfter) {
	t.Helper()
	p := testenv.NewProxy(t, strings.TrimPrefix(e.Endpoint(), "http://"))
	cut := newCutAfter(putTxn, p.HalfOpen)
	return interceptedClient(t, []string{"http://" + p.Addr()}, cut.intercept), p, cut
}

// queuedWhenCut is the frame of a test of a waiter that etcd stops
// answering right after its put has queued it. In each of the first two
// wait modes (a subtest each), a holder on a client of its own holds key
// (prefix and the mode's name), acquired with holderOpts; l, in that mode,
// made with opts, is on a client whose connection goes half-open right
// after its next put (cut, armed before wait runs). wait runs l's Acquire
// of key and checks its outcome. Then the client reconnects, the waiter's
// entry must leave the queue within 30 s (gone says how), the holder
// releases, and the lock must be free for both Lockers.
func queuedWhenCut(t *testing.T, prefix, gone string, opts []etcdlock.Option, holderOpts []instrument.AcquireOption,
	wait func(t *testing.T, l *etcdlock.Locker, key string, cut *cutAfter)) {
	t.Helper()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	other := newLocker(t, admin)
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			key := prefix + mode.name
			c, p, cut := halfOpenAfterPut(t, e)
			t.Cleanup(p.Reset)
			l := inWaitMode(newLocker(t, c, opts...), mode.max)
			holder := mustAcquire(t, other, key, holderOpts...)
			cut.arm()
			wait(t, l, key, cut)
			p.Reset() // the client reconnects
			testenv.WaitFor(t, 30*time.Second, gone, func() bool {
				return queueLen(t, admin, other, key) == 1
			})
			mustRelease(t, holder)
			lockIsFree(t, key, other, l)
		})
	}
}

// giveUpWhenCut runs l.Acquire(key) in the background with cut armed, ends
// its context once the connection has gone half-open after its put, and
// returns its outcome (returnedAtCallersEnd), what naming it.
func giveUpWhenCut(t *testing.T, cut *cutAfter, what string, l instrument.Locker, key string, opts ...instrument.AcquireOption) acquired {
	t.Helper()
	cut.arm()
	got, cancel := acquireCancellable(t, l, key, opts...)
	waitClosed(t, cut.done, 10*time.Second, what+": its put")
	cancel()
	return returnedAtCallersEnd(t, got, what)
}

// leaveGhost queues a waiter of l on key, as the queue's nth entry, and ends
// its context once its watch is in place, with g holding every revoke
// back: Acquire must return at its caller's end, and its entry (the ghost)
// stands. It returns the ghost.
func leaveGhost(t *testing.T, admin *clientv3.Client, l *etcdlock.Locker, g *revokeGate, key string, n int64) *mvccpb.KeyValue {
	t.Helper()
	watching := etcdlock.Watching(l)
	got, cancel := acquireCancellable(t, l, key, instrument.WithTTL(time.Hour))
	waitWatching(t, l, watching+1)
	ghost := newestEntry(t, admin, l, key, n)
	g.shut.Store(true)
	cancel()
	gaveUp(t, returnedAtCallersEnd(t, got, "the waiter whose context ended while revokes were held back"), "the waiter")
	return ghost
}

// takenInOrder checks, once the ghosts' revokes may get through, that
// first and then second take the lock, each after the holder before it
// (whose fence was after) and once every ghost's lease is gone, the second
// only once the first has released.
func takenInOrder(t *testing.T, admin *clientv3.Client, after uint64, first, second <-chan acquired, ghosts ...int64) {
	t.Helper()
	r1 := waitAcquired(t, first, time.Minute, "the first waiter behind the ghosts, once their revokes get through")
	if r1.err != nil {
		t.Fatalf("the first waiter behind the ghosts: %v", r1.err)
	}
	for _, id := range ghosts {
		if !leaseGone(t, admin, id) {
			t.Errorf("the first waiter got the lock while ghost lease %x was live", id)
		}
	}
	if r1.lease.Fence() <= after {
		t.Errorf("fence %d not above the released holder's %d", r1.lease.Fence(), after)
	}
	stillWaiting(t, "while the first held the lock", second)
	mustRelease(t, r1.lease)
	r2 := waitAcquired(t, second, 30*time.Second, "the second waiter behind the ghosts")
	if r2.err != nil {
		t.Fatalf("the second waiter behind the ghosts: %v", r2.err)
	}
	if r2.lease.Fence() <= r1.lease.Fence() {
		t.Errorf("fence %d not above the previous holder's %d", r2.lease.Fence(), r1.lease.Fence())
	}
	mustRelease(t, r2.lease)
}

// mutexKeys counts s's Mutex keys for key under pfx (0 or 1), read on c.
func mutexKeys(t *testing.T, c *clientv3.Client, pfx, key string, s *concurrency.Session) int64 {
	t.Helper()
	resp, err := c.Get(timeout(t, 5*time.Second), fmt.Sprintf("%s%s/%x", pfx, key, s.Lease()), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// mutexIsFree checks that once holder (if any) has released key, another
// session (other) can take it at once, then m, which may wait: m gives
// the key's in-process turn back just after its delete, which the test may
// have seen first. after says what went before.
func mutexIsFree(t *testing.T, key, after string, holder instrument.Lease, other, m *etcdlock.MutexLocker) {
	t.Helper()
	if holder != nil {
		mustRelease(t, holder)
	}
	h, err := other.Acquire(timeout(t, 10*time.Second), key, instrument.FailFast())
	if err != nil {
		t.Fatalf("another session cannot lock after %s: %v", after, err)
	}
	mustRelease(t, h)
	h, err = m.Acquire(timeout(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("the same adapter cannot lock after %s: %v", after, err)
	}
	mustRelease(t, h)
}

// TestAcquire_AWaiterWhoseContextEndsWhileEtcdIsUnreachableReturnsAtOnce:
// a waiter has queued behind a holder when etcd becomes unreachable (the
// connection goes half-open right after its entry was put), and its
// caller's context ends. The caller's deadline is rule one: Acquire must
// return then, not after an inline cleanup that cannot get through (it
// took 2 s for the revoke alone, and as long again for the watches the
// waiter had asked for after its put), as a service with a 100 ms budget
// per request would otherwise pile up goroutines exactly when etcd is
// sick. Its entry is then still there, on a lease nobody renews; once etcd
// is reachable again it must go (TTL 1 h), and the lock with it.
func TestAcquire_AWaiterWhoseContextEndsWhileEtcdIsUnreachableReturnsAtOnce(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	other := newLocker(t, admin)
	ttl := instrument.WithTTL(time.Hour)
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			key := "gives-up-unreachable/" + mode.name
			c, p, cut := halfOpenAfterPut(t, e)
			l := inWaitMode(newLocker(t, c), mode.max)
			etcdlock.SetCleanupBound(l, ownCleanupBound)
			holder := mustAcquire(t, other, key, ttl)
			gaveUp(t, giveUpWhenCut(t, cut, "the waiter whose context ended", l, key, ttl), "the waiter")
			// It returned without its revoke: the entry stands.
			resp, err := admin.Get(timeout(t, 5*time.Second), l.QueuePrefix(key), append(clientv3.WithLastCreate(), clientv3.WithPrefix())...)
			if err != nil || len(resp.Kvs) != 1 || resp.Count != 2 {
				t.Fatalf("queue while etcd was unreachable: %v, %v; want the holder's entry and the waiter's", resp, err)
			}
			waiter := resp.Kvs[0].Lease
			if leaseGone(t, admin, waiter) {
				t.Fatal("the waiter's lease is gone although etcd could not be reached: the fault did not hold")
			}
			p.Reset() // the client reconnects
			testenv.WaitFor(t, 30*time.Second, "the waiter's lease to be given up once etcd is reachable (TTL 1 h)", func() bool {
				return leaseGone(t, admin, waiter)
			})
			if n := queueLen(t, admin, other, key); n != 1 {
				t.Fatalf("%d entries in the queue, want the holder's only", n)
			}
			mustRelease(t, holder)
			lockIsFree(t, key, other, l)
		})
	}
}

// TestAcquire_AWaiterThatGaveUpKeepsLaterWaitersBehindItsEntryUntilItIsRevoked:
// a waiter gives up while its revoke cannot get through: Acquire returns at
// once and leaves its entry, the ghost, to the Locker's background revokes.
// Meanwhile the ghost is an entry like any other: waiters queued behind it,
// of the same Locker or of another process, must not be granted the lock
// while it stands once the holder has released (the ghost is then the
// oldest entry, which everyone else takes for the holder), nor may a
// FailFast caller take it. Once the revoke gets through they take it in
// the order they queued, without waiting for the ghost's TTL (1 h).
func TestAcquire_AWaiterThatGaveUpKeepsLaterWaitersBehindItsEntryUntilItIsRevoked(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	l, g := gatedLocker(t, e.Endpoints())
	other, elsewhere := newLocker(t, admin), newLocker(t, admin)
	const key = "ghost-entry"
	ttl := instrument.WithTTL(time.Hour)
	holder := mustAcquire(t, other, key, ttl)
	ghost := leaveGhost(t, admin, l, g, key, 2)
	if leaseGone(t, admin, ghost.Lease) || queueLen(t, admin, l, key) != 2 {
		t.Fatal("the ghost entry is gone although its revoke was held back: the fault did not hold")
	}

	// A later waiter of the same Locker, then one of another process.
	mine := acquireInBackground(t, l, key, time.Minute, ttl)
	waitWatching(t, l, 2)
	theirs := acquireInBackground(t, elsewhere, key, time.Minute, ttl)
	waitWatching(t, elsewhere, 1)
	if n := queueLen(t, admin, l, key); n != 4 {
		t.Fatalf("%d entries in the queue, want the holder's, the ghost's and two waiters'", n)
	}
	mustRelease(t, holder)
	if h, err := newLocker(t, admin).Acquire(timeout(t, 10*time.Second), key, ttl, instrument.FailFast()); err == nil {
		_ = h.Release(timeout(t, 10*time.Second))
		t.Fatal("FailFast took the lock while the ghost entry stood")
	} else if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("FailFast while the ghost entry stood: %v, want ErrNotAcquired", err)
	}
	// The waiters have had the holder's deletion and a background revoke's
	// worth of time to go wrong.
	g.waitFailed(t)
	stillWaiting(t, "behind the ghost entry", mine, theirs)

	g.let()
	takenInOrder(t, admin, holder.Fence(), mine, theirs, ghost.Lease)
	lockIsFree(t, key, other, l)
}

// TestFromMutex_AnAcquireWhoseContextEndsWhileEtcdIsUnreachableReturnsAtOnce:
// the adapter's Acquire has put this session's Mutex key (queued behind
// another session's, or taken the free lock) when etcd becomes unreachable,
// and its caller's context ends. It must return then: its withdraw of the
// key ran on 2 s of its own, and a waiting Mutex.Lock cleans up after a
// failed wait on the client's context, which a half-open connection holds
// until the client is closed. The key is kept alive by the session, so
// once etcd is reachable again the adapter must still delete it, and
// nobody may lock meanwhile.
func TestFromMutex_AnAcquireWhoseContextEndsWhileEtcdIsUnreachableReturnsAtOnce(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	otherSession := newSession(t, admin, 600)
	for _, tc := range []acquireCase{
		{"wait/held", true, nil},
		{"fail-fast/held", true, []instrument.AcquireOption{instrument.FailFast()}},
		{"wait/free", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := "/gives-up-unreachable/" + tc.name + "/"
			const key = "k"
			c, p, cut := halfOpenAfterPut(t, e)
			// A session TTL the test never outlives: the session must not
			// end, and its key with it, while etcd is unreachable.
			s := newSession(t, c, 600)
			// Before the session's Close, whose revoke would wait out the
			// TTL on a half-open connection if the test fails before its
			// own Reset.
			t.Cleanup(p.Reset)
			m, other := fromMutex(t, s, pfx), fromMutex(t, otherSession, pfx)
			etcdlock.SetMutexCleanupBound(m, ownCleanupBound)
			var holder instrument.Lease
			if tc.held {
				holder = mustAcquire(t, other, key)
			}
			gaveUp(t, giveUpWhenCut(t, cut, "the adapter's Acquire whose context ended", m, key, tc.opts...), "the adapter's Acquire")
			if n := mutexKeys(t, admin, pfx, key, s); n != 1 {
				t.Fatalf("%d Mutex keys of this session while etcd was unreachable, want 1: the fault did not hold", n)
			}
			p.Reset() // the client reconnects
			testenv.WaitFor(t, 30*time.Second, "this session's Mutex key to be deleted once etcd is reachable", func() bool {
				return mutexKeys(t, admin, pfx, key, s) == 0
			})
			mutexIsFree(t, key, "the Acquire gave up", holder, other, m)
		})
	}
}

// TestRelease_OnAnEndedContextWhileEtcdIsUnreachableReturnsAtOnce: the
// common `defer lease.Release(reqCtx)` after the request's context ended,
// while etcd cannot be reached. Release cannot confirm its delete, and must
// say so at once rather than after a delete on 2 s of its own (FromMutex
// did that). The key stands meanwhile; once etcd is reachable it must go
// (the Locker's lease has an hour's TTL, FromMutex's key is kept alive by
// its session), others may lock, and the same Locker's next holder gets a
// higher fence.
func TestRelease_OnAnEndedContextWhileEtcdIsUnreachableReturnsAtOnce(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	for _, tc := range []struct {
		name string
		// lockers returns the Locker under test, on c, and another
		// process's; stands says whether the first one's key stands.
		lockers func(t *testing.T, c *clientv3.Client) (l, other instrument.Locker, stands func(h instrument.Lease) bool)
	}{
		{"Locker", func(t *testing.T, c *clientv3.Client) (instrument.Locker, instrument.Locker, func(instrument.Lease) bool) {
			l := newLocker(t, c)
			etcdlock.SetCleanupBound(l, ownCleanupBound)
			return l, newLocker(t, admin), func(h instrument.Lease) bool { return queueLen(t, admin, l, h.Key()) > 0 }
		}},
		{"FromMutex", func(t *testing.T, c *clientv3.Client) (instrument.Locker, instrument.Locker, func(instrument.Lease) bool) {
			const pfx = "/release-ended-unreachable/"
			s := newSession(t, c, 600)
			m := fromMutex(t, s, pfx)
			etcdlock.SetMutexCleanupBound(m, ownCleanupBound)
			return m, fromMutex(t, newSession(t, admin, 600), pfx), func(h instrument.Lease) bool {
				return mutexKeys(t, admin, pfx, h.Key(), s) > 0
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "release-ended-unreachable-" + tc.name
			ttl := instrument.WithTTL(time.Hour)
			c, p := proxied(t, e)
			l, other, stands := tc.lockers(t, c)
			t.Cleanup(p.Reset) // before the session's Close (above)
			h := mustAcquire(t, l, key, ttl)
			p.HalfOpen() // nothing sent on the client's connection arrives any more
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			released := make(chan error, 1)
			go func() { released <- h.Release(ended) }()
			if err := returnedAtCallersEnd(t, released, "Release on an ended context"); err == nil {
				t.Fatal("Release reported success although etcd could not be reached")
			}
			if !stands(h) {
				t.Fatal("the key is gone although etcd could not be reached: the fault did not hold")
			}
			p.Reset() // the client reconnects
			testenv.WaitFor(t, 30*time.Second, "the key to be given up once etcd is reachable", func() bool { return !stands(h) })
			o, err := other.Acquire(timeout(t, 10*time.Second), key, instrument.FailFast())
			if err != nil {
				t.Fatalf("another process cannot lock after the Release: %v", err)
			}
			mustRelease(t, o)
			next, err := l.Acquire(timeout(t, 10*time.Second), key, ttl)
			if err != nil {
				t.Fatalf("the same Locker cannot lock after the Release: %v", err)
			}
			if next.Fence() <= h.Fence() {
				t.Errorf("fence %d not above the released holder's %d", next.Fence(), h.Fence())
			}
			mustRelease(t, next)
		})
	}
}
