package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// heldCall holds, once armed, the first call that match selects until let
// is called (or the test ends), whatever the call's context says: a request
// stuck on the network whose cancellation has not come through yet. It is
// a unary and a stream interceptor (a stream's match sees no request).
type heldCall struct {
	match func(method string, req any) bool
	armed atomic.Bool
	held  chan struct{} // closed once a call is held
	free  chan struct{} // closed by let
	once  sync.Once
}

func newHeldCall(t *testing.T, match func(method string, req any) bool) *heldCall {
	h := &heldCall{match: match, held: make(chan struct{}), free: make(chan struct{})}
	t.Cleanup(h.let)
	return h
}

// let lets the held call go on (to etcd, under its own context).
func (h *heldCall) let() { h.once.Do(func() { close(h.free) }) }

func (h *heldCall) hold(method string, req any) {
	if h.match(method, req) && h.armed.CompareAndSwap(true, false) {
		close(h.held)
		<-h.free
	}
}

func (h *heldCall) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	h.hold(method, req)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (h *heldCall) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	h.hold(method, nil)
	return streamer(ctx, desc, cc, method, opts...)
}

// waitHeld waits until the call is held, failing if lease ends first.
func (h *heldCall) waitHeld(t *testing.T, what string, lease instrument.Lease) {
	t.Helper()
	select {
	case <-h.held:
	case <-lease.Context().Done():
		select {
		case <-h.held: // held before the lease ended
		default:
			t.Fatalf("the lease ended (%v) before %s was held", context.Cause(lease.Context()), what)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s was not held within 30 s", what)
	}
}

// grantWatch records the lease of each grant and, with told set, tells the
// Locker that etcd granted told seconds although etcd keeps the lease for
// what was asked: the Locker's watchdog then renews after told/3 seconds,
// within the test, while the key stands for the TTL asked (an hour) unless
// it is given up.
type grantWatch struct {
	told  int64
	lease atomic.Int64 // the last lease granted
}

func (g *grantWatch) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if r, ok := reply.(*etcdserverpb.LeaseGrantResponse); ok && err == nil && grantReq(method, req) {
		g.lease.Store(r.ID)
		if g.told > 0 {
			r.TTL = g.told
		}
	}
	return err
}

// TestRelease_OnAnEndedContextWithARenewalInFlightGivesTheLockUp: a Release
// on a context that has already ended (defer lease.Release(reqCtx) after the
// request was cancelled) finds the watchdog's renewal in flight, its
// cancellation not come through yet. Release returns the context's error
// without waiting for it; the lock must still be given up once the renewal
// has settled, not stand on a lease nobody renews for its TTL (an hour):
// the lease is revoked (not pooled), and a second Release is ErrNotHeld.
func TestRelease_OnAnEndedContextWithARenewalInFlightGivesTheLockUp(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	g := &grantWatch{told: 3} // the watchdog renews a second after the grant
	renewal := newHeldCall(t, func(method string, _ any) bool { return method == "/etcdserverpb.Lease/LeaseKeepAlive" })
	l := newLocker(t, interceptedClient(t, e.Endpoints(), g.intercept, grpc.WithChainStreamInterceptor(renewal.stream)))
	const key = "release-ended-context-renewing"
	renewal.armed.Store(true)
	h, err := l.Acquire(timeout(t, 10*time.Second), key, instrument.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	id := g.lease.Load()
	if ttl, err := admin.TimeToLive(timeout(t, 5*time.Second), clientv3.LeaseID(id)); err != nil || ttl.GrantedTTL != 3600 {
		t.Fatalf("the lease's granted TTL in etcd: %v, %v; want an hour", ttl, err)
	}
	renewal.waitHeld(t, "the watchdog's renewal", h)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Release(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release on an ended context: %v, want context.Canceled", err)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, instrument.ErrLockLost) {
		t.Errorf("the lease ended with %v, want ErrLockLost", cause)
	}
	renewal.let() // the renewal goes on, on the context Release cancelled
	testenv.WaitFor(t, 20*time.Second, "the key to be given up (TTL 1 h)", func() bool {
		return queueLen(t, admin, l, key) == 0
	})
	testenv.WaitFor(t, 20*time.Second, "the lease to be revoked, not pooled (TTL 1 h)", func() bool {
		return leaseGone(t, admin, id)
	})
	if err := h.Release(timeout(t, 10*time.Second)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Errorf("second Release: %v, want ErrNotHeld", err)
	}
	lockIsFree(t, key, newLocker(t, admin), l)
}

// TestRelease_ADeleteWhoseWatchStopIsInterruptedGivesTheLeaseUp: the
// release's delete goes through, and the caller's context ends while
// Release waits for the own-key watch to stop (the watch is in a read of
// its key that is held on the network). The lock is free at once; the
// lease, with nothing attached any more and not pooled, must be revoked
// too, not left to its TTL (an hour).
func TestRelease_ADeleteWhoseWatchStopIsInterruptedGivesTheLeaseUp(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	const key = "release-watch-stop-interrupted"
	prefix := newLocker(t, admin).QueuePrefix(key)
	g := &grantWatch{}
	read := newHeldCall(t, func(_ string, req any) bool {
		r, ok := req.(*etcdserverpb.RangeRequest)
		return ok && strings.HasPrefix(string(r.Key), prefix)
	})
	rctx, endRelease := context.WithCancelCause(context.Background())
	defer endRelease(nil)
	// The delete's reply comes back, and the caller's context ends with it.
	endAfterDelete := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && deleteTxn(method, req) {
			endRelease(errCallerGone)
		}
		return err
	}
	l := newLocker(t, interceptedClient(t, e.Endpoints(), g.intercept,
		grpc.WithChainUnaryInterceptor(endAfterDelete, read.unary)))
	// The own-key watch reads the key once it is created (100 ms after the
	// lock was taken); taking a free lock reads nothing on its own.
	read.armed.Store(true)
	h, err := l.Acquire(timeout(t, 10*time.Second), key, instrument.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	id := g.lease.Load()
	read.waitHeld(t, "the own-key watch's read", h)

	if err := h.Release(rctx); !errors.Is(err, errCallerGone) {
		t.Fatalf("Release: %v, want the watch stop interrupted by the context's end", err)
	}
	if n := queueLen(t, admin, l, key); n != 0 {
		t.Fatalf("%d entries in the queue after a delete that went through", n)
	}
	read.let()
	testenv.WaitFor(t, 20*time.Second, "the lease to be revoked (TTL 1 h)", func() bool {
		return leaseGone(t, admin, id)
	})
	lockIsFree(t, key, newLocker(t, admin), l)
}
