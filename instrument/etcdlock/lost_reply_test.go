package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// errCallerGone ends the caller's context when a reply is lost on it.
var errCallerGone = errors.New("caller gone while the reply was on its way")

// errConnBroken is what gRPC says of a request whose connection broke after
// it was written: the client cannot tell whether etcd applied it.
var errConnBroken = status.Error(codes.Unavailable, "error reading from server: EOF (injected: reply lost)")

// lostReply is a unary client interceptor: once armed, the next request
// that match selects goes to etcd, which applies it, and its reply is lost.
// With end set, the caller's context ends while the reply is on its way
// (and clientv3, seeing it ended, does not send the request again);
// without, the connection broke (codes.Unavailable, which clientv3 does not
// retry for a write). afterLoss, if set, runs once the reply is lost, before
// the caller learns of it (a proxy's HalfOpen: nothing sent afterwards on
// the connection arrives).
type lostReply struct {
	match     func(method string, req any) bool
	end       context.CancelCauseFunc
	afterLoss func()
	// withheld holds the reply back until the request's context ends, as
	// when etcd became unreachable after applying the request: what ends
	// the wait is the request's bound (or the caller's end).
	withheld bool

	armed  atomic.Bool
	lost   chan struct{} // closed once a reply was lost
	lease  atomic.Int64  // the lease of the lost put, if it put
	grants atomic.Int64  // lease grants sent from the arming on
}

func newLostReply(match func(method string, req any) bool) *lostReply {
	return &lostReply{match: match, lost: make(chan struct{})}
}

// arm loses the next matching request's reply.
func (f *lostReply) arm() {
	f.grants.Store(0)
	f.armed.Store(true)
}

func (f *lostReply) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if grantReq(method, req) {
		f.grants.Add(1)
	}
	if !f.match(method, req) || !f.armed.CompareAndSwap(true, false) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if err := invoker(context.WithoutCancel(ctx), method, req, reply, cc, opts...); err != nil {
		return err // not applied: the test fails on "no reply was lost"
	}
	if tr, ok := req.(*etcdserverpb.TxnRequest); ok {
		for _, op := range slices.Concat(tr.Success, tr.Failure) {
			if p := op.GetRequestPut(); p != nil {
				f.lease.Store(p.Lease)
			}
		}
	}
	if f.afterLoss != nil {
		f.afterLoss()
	}
	close(f.lost)
	if f.withheld {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	if f.end != nil {
		f.end(errCallerGone)
		return status.FromContextError(ctx.Err()).Err()
	}
	return errConnBroken
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// putTxn selects a transaction that puts a key: an attempt to take a lock
// or to queue for it.
func putTxn(method string, req any) bool {
	tr, ok := req.(*etcdserverpb.TxnRequest)
	if !ok {
		return false
	}
	for _, op := range slices.Concat(tr.Success, tr.Failure) {
		if op.GetRequestPut() != nil {
			return true
		}
	}
	return false
}

// deleteTxn selects a transaction that deletes a key: a release.
func deleteTxn(method string, req any) bool {
	tr, ok := req.(*etcdserverpb.TxnRequest)
	if !ok {
		return false
	}
	for _, op := range tr.Success {
		if op.GetRequestDeleteRange() != nil {
			return true
		}
	}
	return false
}

// grantReq selects a lease grant.
func grantReq(method string, _ any) bool { return method == "/etcdserverpb.Lease/LeaseGrant" }

// faultyClient returns a client of endpoints whose unary requests go
// through f.
func faultyClient(t *testing.T, endpoints []string, f *lostReply) *clientv3.Client {
	t.Helper()
	return interceptedClient(t, endpoints, f.intercept)
}

// interceptedClient returns a client of endpoints whose unary requests go
// through icpt, closed when the test ends. more are further dial options
// (a stream interceptor, more unary ones after icpt).
func interceptedClient(t *testing.T, endpoints []string, icpt grpc.UnaryClientInterceptor, more ...grpc.DialOption) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: append([]grpc.DialOption{grpc.WithChainUnaryInterceptor(icpt)}, more...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// leaseGone reports whether etcd no longer knows lease id (revoked or
// expired): nothing attached to it stands, and nobody keeps it alive.
func leaseGone(t *testing.T, c *clientv3.Client, id int64) bool {
	t.Helper()
	resp, err := c.TimeToLive(timeout(t, 5*time.Second), clientv3.LeaseID(id))
	if err != nil {
		t.Fatalf("time to live of lease %x: %v", id, err)
	}
	return resp.TTL == -1
}

// acquireCase is a way an Acquire's attempt runs (lostAcquireCases).
type acquireCase struct {
	name string
	held bool
	opts []instrument.AcquireOption
}

// lostAcquireCases are the ways an Acquire's attempt runs: callers that
// do not queue (FailFast, Retry) and one that waits, on a free key or on a
// key someone else holds (the lost put then queues behind the holder).
var lostAcquireCases = []acquireCase{
	{"fail-fast", false, []instrument.AcquireOption{instrument.FailFast()}},
	{"retry", false, []instrument.AcquireOption{instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 3)}},
	{"wait/free", false, nil},
	{"wait/held", true, nil},
}

// lostAcquire runs one Acquire of key on l, as tc says and with an hour's
// TTL, whose attempt's reply f loses, the caller's context ending with it
// if ends. It checks what such an Acquire must do: fail, with
// ErrNotAcquired and the cause when the caller's context ended, on a
// pooled lease (no grant) or a fresh one. When tc.held, other holds key
// meanwhile; release gives it up.
func lostAcquire(t *testing.T, l, other *etcdlock.Locker, f *lostReply, key string, tc acquireCase, pooled, ends bool) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(timeout(t, 30*time.Second))
	t.Cleanup(func() { cancel(nil) })
	if ends {
		f.end = cancel
	}
	ttl := instrument.WithTTL(time.Hour)
	if pooled {
		warm, err := l.Acquire(timeout(t, 10*time.Second), "warm-up/"+key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(timeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	release = func() {}
	if tc.held {
		holder, err := other.Acquire(timeout(t, 10*time.Second), key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		release = func() {
			if err := holder.Release(timeout(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.arm()
	lease, err := l.Acquire(ctx, key, append([]instrument.AcquireOption{ttl}, tc.opts...)...)
	if err == nil {
		_ = lease.Release(timeout(t, 10*time.Second))
		t.Fatalf("Acquire returned a lease (fence %d) although its reply was lost", lease.Fence())
	}
	if !isClosed(f.lost) {
		t.Fatalf("no reply was lost; Acquire returned %v", err)
	}
	if ends && (!errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, errCallerGone)) {
		t.Errorf("Acquire = %v, want ErrNotAcquired wrapping the context's cause", err)
	}
	if g, want := f.grants.Load(), map[bool]int64{false: 1, true: 0}[pooled]; g != want {
		t.Errorf("%d lease grants for the attempt, want %d (pooled %t)", g, want, pooled)
	}
	return release
}

// lockIsFree checks that others, then l, can take key at once.
func lockIsFree(t *testing.T, key string, lockers ...*etcdlock.Locker) {
	t.Helper()
	for _, l := range lockers {
		got, err := l.Acquire(timeout(t, 10*time.Second), key, instrument.WithTTL(time.Hour), instrument.FailFast())
		if err != nil {
			t.Fatalf("the lock cannot be taken after the lost attempt: %v", err)
		}
		if err := got.Release(timeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAcquire_AnAttemptWhoseReplyIsLostLeavesNoLockBehind: the attempt's
// transaction puts the entry under the Acquire's lease (taking the lock, or
// queueing for it), and its reply is lost: the caller's context ends before
// it comes, or the connection breaks. Acquire fails, and nobody knows the
// entry is there; a lease that stayed alive (etcdlock keeps a lease alive
// while it waits, and pools it after a release) would keep the lock for
// ever, one left unrenewed for its TTL (an hour here). The lease must be
// given up, and the lock with it, whether it was fresh or pooled.
func TestAcquire_AnAttemptWhoseReplyIsLostLeavesNoLockBehind(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	other := newLocker(t, admin)
	for _, tc := range lostAcquireCases {
		for _, pooled := range []bool{false, true} {
			for _, ends := range []bool{true, false} {
				name := fmt.Sprintf("%s/pooled=%t/caller-ends=%t", tc.name, pooled, ends)
				t.Run(name, func(t *testing.T) {
					key := "lost-acquire/" + name
					f := newLostReply(putTxn)
					l := newLocker(t, faultyClient(t, e.Endpoints(), f))
					release := lostAcquire(t, l, other, f, key, tc, pooled, ends)
					testenv.WaitFor(t, 20*time.Second, "the lost attempt's lease to be given up (TTL 1 h)", func() bool {
						return leaseGone(t, admin, f.lease.Load())
					})
					want := int64(0)
					if tc.held {
						want = 1
					}
					if n := queueLen(t, admin, other, key); n != want {
						t.Fatalf("%d entries in the queue, want %d", n, want)
					}
					release()
					lockIsFree(t, key, other, l)
				})
			}
		}
	}
}

// TestAcquire_AnAttemptWhoseReplyIsLostAsEtcdBecomesUnreachableLeavesNoLockBehind:
// the same loss, but the connection goes half-open with it (the host or a
// middlebox vanished: what lost the reply also loses the requests that
// follow) for longer than the Acquire's own cleanup may take. Acquire
// returns; once etcd can be reached again, the lease must still be given
// up: nothing else ends it before its TTL (an hour here), and the lock
// stays taken by nobody meanwhile.
func TestAcquire_AnAttemptWhoseReplyIsLostAsEtcdBecomesUnreachableLeavesNoLockBehind(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	other := newLocker(t, admin)
	for _, tc := range lostAcquireCases {
		for _, pooled := range []bool{false, true} {
			name := fmt.Sprintf("%s/pooled=%t", tc.name, pooled)
			t.Run(name, func(t *testing.T) {
				key := "lost-acquire-cut/" + name
				p := testenv.NewProxy(t, strings.TrimPrefix(e.Endpoint(), "http://"))
				f := newLostReply(putTxn)
				f.afterLoss = p.HalfOpen
				l := newLocker(t, faultyClient(t, []string{"http://" + p.Addr()}, f))
				release := lostAcquire(t, l, other, f, key, tc, pooled, true)
				// Acquire has returned: whatever it tried to give the lease
				// up with has not got through.
				ttl, err := admin.TimeToLive(timeout(t, 5*time.Second), clientv3.LeaseID(f.lease.Load()), clientv3.WithAttachedKeys())
				if err != nil {
					t.Fatal(err)
				}
				if ttl.TTL == -1 || len(ttl.Keys) != 1 {
					t.Fatalf("the lost attempt's lease has TTL %d and %d keys, want it live with its entry: the fault did not hold", ttl.TTL, len(ttl.Keys))
				}
				p.Reset() // the client reconnects
				testenv.WaitFor(t, 20*time.Second, "the lost attempt's lease to be given up once etcd is reachable (TTL 1 h)", func() bool {
					return leaseGone(t, admin, f.lease.Load())
				})
				release()
				lockIsFree(t, key, other, l)
			})
		}
	}
}

// TestAcquire_AGrantWhoseReplyIsLostLeavesTheLockFree: the lease grant
// runs and its reply is lost as the caller's context ends. Nothing was put
// under that lease, nobody keeps it alive, and it expires by itself: the
// lock is free at once.
func TestAcquire_AGrantWhoseReplyIsLostLeavesTheLockFree(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	for _, tc := range lostAcquireCases[:3] {
		t.Run(tc.name, func(t *testing.T) {
			key := "lost-grant/" + tc.name
			ctx, cancel := context.WithCancelCause(timeout(t, 30*time.Second))
			defer cancel(nil)
			f := newLostReply(grantReq)
			f.end = cancel
			l := newLocker(t, faultyClient(t, e.Endpoints(), f))
			f.arm()
			lease, err := l.Acquire(ctx, key, append([]instrument.AcquireOption{instrument.WithTTL(time.Hour)}, tc.opts...)...)
			if err == nil {
				_ = lease.Release(timeout(t, 10*time.Second))
				t.Fatal("Acquire returned a lease although its grant's reply was lost")
			}
			if !isClosed(f.lost) {
				t.Fatalf("no reply was lost; Acquire returned %v", err)
			}
			if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, errCallerGone) {
				t.Errorf("Acquire = %v, want ErrNotAcquired wrapping the context's cause", err)
			}
			if n := queueLen(t, admin, l, key); n != 0 {
				t.Fatalf("%d entries in the queue after a lost grant", n)
			}
			lockIsFree(t, key, newLocker(t, admin), l)
		})
	}
}

// TestRelease_ADeleteWhoseReplyIsLostLeavesTheLockFree: the release's
// owner-checked delete runs and its reply is lost (the caller's context
// ends, or the connection breaks). Release returns an error and the lease
// ends with ErrLockLost; the lock is free for the next caller, and the
// lease is not pooled for a later Acquire.
func TestRelease_ADeleteWhoseReplyIsLostLeavesTheLockFree(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	for _, ends := range []bool{true, false} {
		t.Run(fmt.Sprintf("caller-ends=%t", ends), func(t *testing.T) {
			key := fmt.Sprintf("lost-release/%t", ends)
			f := newLostReply(deleteTxn)
			l := newLocker(t, faultyClient(t, e.Endpoints(), f))
			h, err := l.Acquire(timeout(t, 10*time.Second), key, instrument.WithTTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancelCause(timeout(t, 30*time.Second))
			defer cancel(nil)
			if ends {
				f.end = cancel
			}
			f.arm()
			if err := h.Release(rctx); err == nil {
				t.Fatal("Release reported success although its reply was lost")
			}
			if !isClosed(f.lost) {
				t.Fatal("no reply was lost")
			}
			if !errors.Is(context.Cause(h.Context()), instrument.ErrLockLost) {
				t.Errorf("the lease ended with %v, want ErrLockLost", context.Cause(h.Context()))
			}
			if n := queueLen(t, admin, l, key); n != 0 {
				t.Fatalf("%d entries in the queue after the release ran", n)
			}
			f.grants.Store(0)
			lockIsFree(t, key, newLocker(t, admin), l)
			if f.grants.Load() != 1 {
				t.Errorf("%d grants for l's next Acquire, want 1: the lease whose release's reply was lost was pooled", f.grants.Load())
			}
		})
	}
}

// TestRelease_ADeleteThatDoesNotReachEtcdLeavesNoLockBehind: the release's
// delete never reaches etcd (the connection went half-open), nor does the
// revoke that follows it on the caller's context. The key stands on a lease
// nobody renews any more: once etcd can be reached again it must be given
// up, not left to its TTL (an hour here).
func TestRelease_ADeleteThatDoesNotReachEtcdLeavesNoLockBehind(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	c, p := proxied(t, e)
	l := newLocker(t, c)
	const key = "release-unreached"
	h, err := l.Acquire(timeout(t, 10*time.Second), key, instrument.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	p.HalfOpen() // nothing sent on the client's connection arrives any more
	if err := h.Release(timeout(t, 500*time.Millisecond)); err == nil {
		t.Fatal("Release succeeded over a half-open connection")
	}
	if n := queueLen(t, admin, l, key); n != 1 {
		t.Fatalf("%d entries in the queue after a release that did not reach etcd, want the key still standing", n)
	}
	p.Reset() // the client reconnects
	testenv.WaitFor(t, 20*time.Second, "the unreleased key to be given up once etcd is reachable (TTL 1 h)", func() bool {
		return queueLen(t, admin, l, key) == 0
	})
	lockIsFree(t, key, newLocker(t, admin), l)
}

// TestRelease_OnAnEndedContextGivesTheLockUp: a Release on a context that
// has already ended (defer lease.Release(reqCtx) after the request was
// cancelled) sends nothing on it and returns the context's error. The key
// must still go, not stand on its unrenewed lease for its TTL (an hour).
func TestRelease_OnAnEndedContextGivesTheLockUp(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	l := newLocker(t, c)
	const key = "release-ended-context"
	h, err := l.Acquire(timeout(t, 10*time.Second), key, instrument.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Release(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release on an ended context: %v, want context.Canceled", err)
	}
	testenv.WaitFor(t, 20*time.Second, "the key to be given up (TTL 1 h)", func() bool {
		return queueLen(t, c, l, key) == 0
	})
	lockIsFree(t, key, newLocker(t, c), l)
}

// TestFromMutex_AnAttemptWhoseReplyIsLostLeavesNoKeyBehind: the Mutex's
// transaction puts this session's key and its reply is lost as the
// caller's context ends, with etcd reachable right after or not (the
// connection goes half-open). The session's keepalive keeps the key for as
// long as the session lives: the adapter must delete it (at once, or in
// the background once etcd is reachable again), or every other session is
// kept out for ever.
func TestFromMutex_AnAttemptWhoseReplyIsLostLeavesNoKeyBehind(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	otherSession := newSession(t, admin, 30)
	for _, tc := range lostAcquireCases {
		for _, cut := range []bool{false, true} {
			name := fmt.Sprintf("%s/unreachable=%t", tc.name, cut)
			t.Run(name, func(t *testing.T) {
				pfx := "/lost-mutex/" + name + "/"
				const key = "k"
				ctx, cancel := context.WithCancelCause(timeout(t, 30*time.Second))
				defer cancel(nil)
				f := newLostReply(putTxn)
				f.end = cancel
				endpoints := e.Endpoints()
				var p *testenv.Proxy
				if cut {
					p = testenv.NewProxy(t, strings.TrimPrefix(e.Endpoint(), "http://"))
					f.afterLoss, endpoints = p.HalfOpen, []string{"http://" + p.Addr()}
				}
				s := newSession(t, faultyClient(t, endpoints, f), 30)
				m := fromMutex(t, s, pfx)
				other := fromMutex(t, otherSession, pfx)
				var holder instrument.Lease
				if tc.held {
					holder = mustAcquire(t, other, key)
				}
				f.arm()
				lease, err := m.Acquire(ctx, key, tc.opts...)
				if err == nil {
					_ = lease.Release(timeout(t, 10*time.Second))
					t.Fatalf("Acquire returned a lease (fence %d) although its reply was lost", lease.Fence())
				}
				if !isClosed(f.lost) {
					t.Fatalf("no reply was lost; Acquire returned %v", err)
				}
				if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, errCallerGone) {
					t.Errorf("Acquire = %v, want ErrNotAcquired wrapping the context's cause", err)
				}
				if cut {
					if n := mutexKeys(t, admin, pfx, key, s); n != 1 {
						t.Fatalf("%d Mutex keys of this session while etcd was unreachable, want 1: the fault did not hold", n)
					}
					p.Reset() // the client reconnects
				}
				testenv.WaitFor(t, 20*time.Second, "this session's Mutex key to be deleted", func() bool {
					return mutexKeys(t, admin, pfx, key, s) == 0
				})
				mutexIsFree(t, key, "the lost attempt", holder, other, m)
			})
		}
	}
}

// revokeGate holds every lease revoke back while shut (until its context
// ends, as through a partition) and counts the revokes in flight at once.
type revokeGate struct {
	shut   atomic.Bool
	open   chan struct{}
	mu     sync.Mutex
	now    int
	max    int
	failed int // revokes the gate held back until they failed
}

func newRevokeGate() *revokeGate { return &revokeGate{open: make(chan struct{})} }

// gatedLocker returns a Locker of endpoints whose revokes go through a
// revokeGate, and the gate.
func gatedLocker(t *testing.T, endpoints []string) (*etcdlock.Locker, *revokeGate) {
	t.Helper()
	g := newRevokeGate()
	l := newLocker(t, interceptedClient(t, endpoints, g.intercept))
	etcdlock.SetCleanupBound(l, ownCleanupBound)
	return l, g
}

func (g *revokeGate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method != "/etcdserverpb.Lease/LeaseRevoke" {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	g.mu.Lock()
	g.now++
	g.max = max(g.max, g.now)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.now--
		g.mu.Unlock()
	}()
	if g.shut.Load() {
		select {
		case <-ctx.Done():
			g.mu.Lock()
			g.failed++
			g.mu.Unlock()
			return status.FromContextError(ctx.Err()).Err()
		case <-g.open:
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// let lets every revoke through, those held back included.
func (g *revokeGate) let() {
	g.shut.Store(false)
	close(g.open)
}

// reset forgets the revokes seen so far.
func (g *revokeGate) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.max, g.failed = g.now, 0
}

func (g *revokeGate) counts() (maxInFlight, failed int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.max, g.failed
}

// waitFailed forgets the revokes seen so far and waits until one more has
// been held back until it failed: once every Acquire has returned, only
// the background revoker sends one.
func (g *revokeGate) waitFailed(t *testing.T) {
	t.Helper()
	g.reset()
	testenv.WaitFor(t, 30*time.Second, "a background revoke to be tried and fail", func() bool {
		_, failed := g.counts()
		return failed >= 1
	})
}

// TestAcquire_WaitersThatGiveUpWhileEtcdIsUnreachableLeaveTheQueue: twelve
// waiters queued behind a holder give up while their revokes cannot get
// through. Their entries stand on leases nobody renews; left to their TTL
// (an hour), they would keep everyone queued after them waiting once the
// holder is done. The revokes must be tried again in the background, one
// at a time (an outage in which many callers give up must not turn into as
// many requests in flight), until every entry is gone.
func TestAcquire_WaitersThatGiveUpWhileEtcdIsUnreachableLeaveTheQueue(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	l, g := gatedLocker(t, e.Endpoints())
	other := newLocker(t, admin)
	const key, waiters = "waiters-give-up-unreachable", 12
	holder := mustAcquire(t, other, key)
	var cancels []context.CancelFunc
	var gots []<-chan acquired
	for range waiters {
		got, cancel := acquireCancellable(t, l, key, instrument.WithTTL(time.Hour))
		cancels = append(cancels, cancel)
		gots = append(gots, got)
	}
	waitWatching(t, l, waiters)
	entries, err := admin.Get(timeout(t, 5*time.Second), l.QueuePrefix(key), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries.Kvs) != waiters+1 {
		t.Fatalf("%d entries in the queue, want the holder's and %d waiters'", len(entries.Kvs), waiters)
	}
	g.shut.Store(true)
	for _, cancel := range cancels {
		cancel()
	}
	for _, got := range gots {
		gaveUp(t, returnedAtCallersEnd(t, got, "a waiter whose context ended while revokes were held back"), "a waiter")
	}
	// Every waiter has returned, its own revoke failed. From here on only
	// a retry in the background sends revokes: let one fail too (without
	// retries, none comes), so that they are tried while etcd cannot be
	// reached.
	g.waitFailed(t)
	if n := queueLen(t, admin, other, key); n != waiters+1 {
		t.Fatalf("%d entries in the queue while the revokes could not get through, want %d: the fault did not hold", n, waiters+1)
	}
	g.let()
	testenv.WaitFor(t, 30*time.Second, "the waiters' entries to be revoked (TTL 1 h)", func() bool {
		return queueLen(t, admin, other, key) == 1
	})
	for _, kv := range entries.Kvs {
		if kv.CreateRevision != int64(holder.Fence()) && !leaseGone(t, admin, kv.Lease) {
			t.Errorf("waiter's lease %x still live", kv.Lease)
		}
	}
	if m, _ := g.counts(); m > 1 {
		t.Errorf("%d revokes in flight at once in the background, want one at a time", m)
	}
	mustRelease(t, holder)
	lockIsFree(t, key, other, l)
}

// TestRelease_ARevokeThatCannotGetThroughForTwoTTLsIsTriedOnceEtcdIsBack:
// etcd is down (the whole cluster, here its one member) for longer than two
// TTLs while a Release's revoke cannot get through. No leader means no
// lease expires, and the leader elected on the restart gives every lease
// its whole TTL again (etcd's LeaseCheckpoint is off by default), so the
// key still stands when etcd is back: the background revoke must still be
// trying then, not have given up at two TTLs as if etcd had expired the
// lease meanwhile. (With the test's TTL of 1 s the key would go at its TTL
// anyway; with an hour's, it would stand for that hour.)
func TestRelease_ARevokeThatCannotGetThroughForTwoTTLsIsTriedOnceEtcdIsBack(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	var (
		mu       sync.Mutex
		leaseID  int64
		back     bool // set before the restart: no revoke reaches etcd before it
		answered bool // a revoke of leaseID reached etcd after the restart
	)
	icpt := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := req.(*etcdserverpb.LeaseRevokeRequest); ok {
			mu.Lock()
			if back && r.ID == leaseID && (err == nil || errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound)) {
				answered = true
			}
			mu.Unlock()
		}
		return err
	}
	c := interceptedClient(t, e.Endpoints(), icpt)
	l := newLocker(t, c)
	const key, ttl = "revoke-outage-past-two-ttls", time.Second
	h, err := l.Acquire(timeout(t, 10*time.Second), key, instrument.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(timeout(t, 5*time.Second), l.QueuePrefix(key), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("queue of %q: %v, %v", key, resp, err)
	}
	mu.Lock()
	leaseID = resp.Kvs[0].Lease
	mu.Unlock()

	e.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Release(ctx); err == nil {
		t.Fatal("Release on an ended context with etcd down: nil error")
	}
	// The fault: an outage longer than two TTLs (the time the outage
	// lasts, not a wait for anything).
	time.Sleep(3 * ttl)
	mu.Lock()
	back = true
	mu.Unlock()
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the background revoke to reach etcd once it is back", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return answered
	})
	lockIsFree(t, key, newLocker(t, c), l)
}
