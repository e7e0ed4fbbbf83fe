package etcdlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/internal/testenv"
)

// shortRequests is the request timeout of the Lockers under test, and
// callerTime the time their callers give an Acquire: the caller's context
// ends 100 times later than a round trip's bound, so an Acquire that fails
// while its caller's context still has time was ended by that bound, and
// one that waits for the caller's end is still waiting when the test looks.
// Every round trip before the fault must also fit in the bound: a second,
// not less, as these tests run in parallel with others on a loaded
// two-core machine, where a loopback round trip to an embedded etcd under
// -race can stall for hundreds of milliseconds.
const (
	shortRequests = time.Second
	callerTime    = 100 * shortRequests
)

// governedEtcd is a Governed over an etcdlock Locker, with its own metrics
// and spans.
type governedEtcd struct {
	*instrument.Governed
	reg   *prometheus.Registry
	spans *tracetest.SpanRecorder
}

func governEtcd(t *testing.T, l instrument.Locker, p instrument.StoreFailurePolicy) governedEtcd {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reg := prometheus.NewRegistry()
	g, err := instrument.NewGoverned(l, instrument.WithStoreFailure(p), instrument.WithRegisterer(reg),
		instrument.WithTracerProvider(tp), instrument.WithoutHeartbeat(),
		instrument.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return governedEtcd{g, reg, spans}
}

// degraded is lockgov_store_degraded_total{component="lock"}.
func (g governedEtcd) degraded(t *testing.T) float64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lockgov_store_degraded_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == "lock" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// waiters is lockgov_lock_waiters summed over its series: Acquire calls
// waiting for another holder, on etcd or on the process-local lock.
func (g governedEtcd) waiters(t *testing.T) float64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "lockgov_lock_waiters" {
			for _, m := range mf.GetMetric() {
				n += m.GetGauge().GetValue()
			}
		}
	}
	return n
}

// degradedSpans counts the acquire spans marked lock.degraded.
func (g governedEtcd) degradedSpans() int {
	n := 0
	for _, sp := range g.spans.Ended() {
		for _, kv := range sp.Attributes() {
			if kv.Key == "lock.degraded" && kv.Value.AsBool() {
				n++
			}
		}
	}
	return n
}

// storeError checks err, what an Acquire under FailClosed returned while
// etcd could not be reached and its caller's context (ctx) had time left:
// the store's failure, as Govern reads one, not the caller's giving up.
func storeError(t *testing.T, ctx context.Context, err error, what string) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s: a lease although etcd could not be reached", what)
	case ctx.Err() != nil:
		t.Fatalf("%s returned only once its caller's context had ended (%v): %v", what, ctx.Err(), err)
	case errors.Is(err, instrument.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		t.Fatalf("%s: %v, want the store's failure, not ErrNotAcquired or a context's end", what, err)
	case !storefail.Unavailable(err):
		t.Fatalf("%s: %v, not a store failure to Govern", what, err)
	}
}

// degradedLease checks r, what an Acquire under FailOpen returned while
// etcd could not be reached: a process-local lease.
func degradedLease(t *testing.T, r acquired, what string) instrument.Lease {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v, want a process-local lease", what, r.err)
	}
	if f := r.lease.Fence(); f != 0 {
		t.Fatalf("%s: fence %d, want 0 (process-local)", what, f)
	}
	return r.lease
}

// etcdFaults are the ways etcd becomes unreachable: the connection goes
// half-open (a partition: nothing sent arrives, nothing is refused), or
// the server is killed (the client's reconnects are refused).
var etcdFaults = []struct {
	name string
	cut  func(e *testenv.Etcd, p *testenv.Proxy)
}{
	{"partitioned", func(_ *testenv.Etcd, p *testenv.Proxy) { p.HalfOpen() }},
	{"killed", func(e *testenv.Etcd, _ *testenv.Proxy) { e.Stop() }},
}

// acquirePaths are the round trips at which an Acquire meets the fault:
// the lease grant (a fresh Locker), the transaction that puts its entry (a
// pooled lease: no grant first), for each wait strategy, and a read of the
// queue while it waits behind a holder (at its next poll).
var acquirePaths = []struct {
	name    string
	pooled  bool
	waiting bool
	opts    []instrument.AcquireOption
}{
	{"grant", false, false, nil},
	{"put/fail-fast", true, false, []instrument.AcquireOption{instrument.FailFast()}},
	{"put/retry", true, false, []instrument.AcquireOption{instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 3)}},
	{"put/wait", true, false, nil},
	{"read/wait", false, true, nil},
}

// TestGovern_OverEtcdTheRequestTimeoutMakesAnUnreachableEtcdAStoreFailure:
// etcd becomes unreachable (partitioned or killed) while an Acquire talks
// to it, and its caller's context has a hundred times the request timeout
// left. A clientv3 request waits for an unreachable cluster until its
// context ends, so without a bound of its own the Acquire returned
// ErrNotAcquired with the caller's deadline: FailClosed could not tell the
// store's failure from the caller's, and FailOpen never degraded. Each
// round trip is now bounded: FailClosed returns the store's failure while
// the caller still has time, and FailOpen grants a process-local lock
// (fence 0, counted, span marked), at the grant, the put (each wait
// strategy) and a waiter's read of the queue.
func TestGovern_OverEtcdTheRequestTimeoutMakesAnUnreachableEtcdAStoreFailure(t *testing.T) {
	t.Parallel()
	for _, fault := range etcdFaults {
		for _, path := range acquirePaths {
			for _, policy := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
				name := fault.name + "/" + path.name + "/" + policy.String()
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					e := testenv.NewEtcd(t)
					c, p := proxied(t, e)
					t.Cleanup(p.Reset) // before the client's Close
					l := newLocker(t, c, etcdlock.WithRequestTimeout(shortRequests))
					g := governEtcd(t, l, policy)
					const key = "lock:order:1"
					ttl := instrument.WithTTL(time.Minute)
					waitReachable(t, c) // connected before the fault
					if path.pooled {
						mustRelease(t, mustAcquire(t, l, "warm-up", ttl))
					}
					var got <-chan acquired
					if path.waiting {
						holder := mustAcquire(t, newLocker(t, e.Client(t)), key, ttl)
						t.Cleanup(func() { _ = holder.Release(bounded(10 * time.Second)) })
						got = acquireInBackground(t, g, key, callerTime, append([]instrument.AcquireOption{ttl}, path.opts...)...)
						waitWatching(t, l, 1)
					}
					fault.cut(e, p)
					ctx := timeout(t, callerTime)
					if got == nil {
						lease, err := g.Acquire(ctx, key, append([]instrument.AcquireOption{ttl}, path.opts...)...)
						r := make(chan acquired, 1)
						r <- acquired{lease, err}
						got = r
					}
					r := <-got
					if policy == instrument.FailClosed {
						if r.err == nil {
							_ = r.lease.Release(bounded(time.Second))
						}
						storeError(t, ctx, r.err, "Acquire")
						if n := g.degraded(t); n != 0 {
							t.Fatalf("degraded = %v under FailClosed, want 0", n)
						}
						return
					}
					lease := degradedLease(t, r, "Acquire")
					if n := g.degraded(t); n != 1 {
						t.Errorf("degraded = %v, want 1", n)
					}
					if err := lease.Release(timeout(t, 10*time.Second)); err != nil {
						t.Fatal(err)
					}
					if n := g.degradedSpans(); n != 1 {
						t.Errorf("%d acquire spans marked lock.degraded, want 1", n)
					}
				})
			}
		}
	}
}

// TestGovern_FailOpenOverAPartitionedEtcdStillExcludesThisProcessesGoroutines:
// under FailOpen with etcd partitioned, the process-local lock that stands
// in for etcd's must still exclude this process's goroutines from each
// other: a second caller fails fast, a waiter gets the key only once the
// first caller has released it, and a store lease this process took
// before the partition (still valid) keeps the fallback out of its key.
func TestGovern_FailOpenOverAPartitionedEtcdStillExcludesThisProcessesGoroutines(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	c, p := proxied(t, e)
	t.Cleanup(p.Reset)
	l := newLocker(t, c, etcdlock.WithRequestTimeout(shortRequests))
	g := governEtcd(t, l, instrument.FailOpen)
	ttl := instrument.WithTTL(time.Minute)
	ctx := timeout(t, callerTime)

	stored, err := g.Acquire(ctx, "lock:order:stored", ttl)
	if err != nil || stored.Fence() == 0 {
		t.Fatalf("Acquire with etcd up: fence %v, %v; want a lease from etcd", stored, err)
	}
	p.HalfOpen()

	// The store lease taken before the partition is still valid (TTL 1 min):
	// the fallback must not grant its key.
	if h, err := g.Acquire(ctx, "lock:order:stored", ttl, instrument.FailFast()); err == nil {
		_ = h.Release(ctx)
		t.Fatalf("FailOpen granted a process-local lock (fence %d) over this process's valid etcd lease", h.Fence())
	} else if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("FailFast over this process's etcd lease: %v, want ErrNotAcquired", err)
	}

	const key = "lock:order:2"
	first := degradedLease(t, acquiredNow(g.Acquire(ctx, key, ttl)), "the first caller")
	if h, err := g.Acquire(ctx, key, ttl, instrument.FailFast()); err == nil {
		_ = h.Release(ctx)
		t.Fatal("a second caller of the process got the key while the first held its process-local lock")
	} else if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("second caller, FailFast: %v, want ErrNotAcquired", err)
	}
	var released atomic.Bool
	got := make(chan error, 1)
	go func() {
		h, err := g.Acquire(ctx, key, ttl)
		if err == nil {
			if !released.Load() {
				err = errors.New("the waiter got the key before the first caller released it")
			} else if h.Fence() != 0 {
				err = errors.New("the waiter's lease is not process-local")
			}
			_ = h.Release(ctx)
		}
		got <- err
	}()
	// The waiter has fallen back (its own round trip to etcd timed out) and
	// waits on the process-local lock: etcd being cut, that is the only
	// wait it can be in. (Its degraded decision is counted once that lock
	// has decided.)
	testenv.WaitFor(t, callerTime, "the waiter to fall back", func() bool { return g.waiters(t) == 1 })
	released.Store(true)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the caller's context ended: the fallback was decided by it, not by the request timeout")
	}
	if n := g.degraded(t); n != 4 {
		t.Errorf("degraded = %v, want 4 (the refusal over the etcd lease, the first caller, the second's refusal, the waiter)", n)
	}
	p.Reset()
	_ = stored.Release(timeout(t, 10*time.Second))
}

// bounded is a context that ends after d, for a cleanup that etcd may not
// answer (its timer ends it; nothing waits for it after).
func bounded(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	time.AfterFunc(d, cancel)
	return ctx
}

// acquiredNow is the outcome of an Acquire called in the test's goroutine.
func acquiredNow(lease instrument.Lease, err error) acquired { return acquired{lease, err} }

// TestGovern_OverASlowEtcdWithinTheRequestTimeoutDoesNotDegrade: etcd
// answers every round trip slowly but well within the request timeout,
// and a waiter waits behind a holder for longer than that timeout (several
// polls of the queue). The bound is per round trip, not on the wait: the
// waiter gets the lock from etcd when the holder releases, with a fence,
// and nothing degrades, under FailOpen and FailClosed alike.
func TestGovern_OverASlowEtcdWithinTheRequestTimeoutDoesNotDegrade(t *testing.T) {
	t.Parallel()
	ttl := instrument.WithTTL(time.Minute)
	waitsOnASlowEtcd(t, slowWaiter{
		what:    "read the queue",
		counted: isQueueRead,
		lockers: func(t *testing.T, c, admin *clientv3.Client, _ string, bound time.Duration) (instrument.Locker, instrument.Locker, func()) {
			l := newLocker(t, c, etcdlock.WithRequestTimeout(bound))
			return l, newLocker(t, admin), func() { waitWatching(t, l, 1) }
		},
		opts: []instrument.AcquireOption{ttl},
	})
}

// slowWaiter is one kind of Locker in waitsOnASlowEtcd.
type slowWaiter struct {
	// what the waiter does in the requests counted says.
	what string
	// counted says a request is one the waiter sends while it waits (a
	// Locker's read of the queue, a MutexLocker's probe).
	counted func(method string, req any) bool
	// lockers returns the waiter's Locker on c (its round trips slowed),
	// with request timeout bound, the holder's on admin (another process),
	// and what returns once the waiter's wait is in place. name tells the
	// policies' subtests apart.
	lockers func(t *testing.T, c, admin *clientv3.Client, name string, bound time.Duration) (waiter, holder instrument.Locker, waiting func())
	// opts are the holder's and the waiter's (besides the poll interval).
	opts []instrument.AcquireOption
}

// waitsOnASlowEtcd: under FailClosed and FailOpen, a waiter of kind w, every
// round trip of which takes 40 ms or more (50 times less than the request
// timeout, 2 s), waits behind another process's holder for three of its
// counted requests, each a poll interval (half the bound) apart: longer
// than the bound. It must still be waiting then, get the lock from etcd
// when the holder releases (a fence above the holder's) and degrade
// nothing.
func waitsOnASlowEtcd(t *testing.T, w slowWaiter) {
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	const (
		latency = 20 * time.Millisecond
		bound   = 2 * time.Second
		poll    = bound / 2
	)
	for _, policy := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
		t.Run(policy.String(), func(t *testing.T) {
			counted := &countRequests{match: w.counted}
			p := testenv.NewProxy(t, strings.TrimPrefix(e.Endpoint(), "http://"))
			c := interceptedClient(t, []string{"http://" + p.Addr()}, counted.intercept)
			t.Cleanup(func() { p.SetLatency(0) })
			l, other, waiting := w.lockers(t, c, admin, policy.String(), bound)
			g := governEtcd(t, l, policy)
			holder := mustAcquire(t, other, "lock:slow:"+policy.String(), w.opts...)
			p.SetLatency(latency)
			got := acquireInBackground(t, g, holder.Key(), time.Minute, append(w.opts, instrument.WithPollInterval(poll))...)
			waiting()
			start := counted.n.Load()
			testenv.WaitFor(t, time.Minute, "the waiter to "+w.what+" three times, or to return", func() bool {
				return counted.n.Load() >= start+3 || len(got) > 0
			})
			stillWaiting(t, "behind the holder on a slow etcd", got)
			mustRelease(t, holder)
			r := waitAcquired(t, got, time.Minute, "the waiter on a slow etcd")
			if r.err != nil {
				t.Fatalf("the waiter on a slow etcd: %v", r.err)
			}
			if r.lease.Fence() <= holder.Fence() {
				t.Errorf("fence %d, want above the holder's %d: a lease from etcd", r.lease.Fence(), holder.Fence())
			}
			mustRelease(t, r.lease)
			if n := g.degraded(t); n != 0 {
				t.Errorf("degraded = %v on a slow etcd, want 0", n)
			}
		})
	}
}

// countRequests counts the unary requests that match.
type countRequests struct {
	match func(method string, req any) bool
	n     atomic.Int64
}

func (c *countRequests) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if c.match(method, req) {
		c.n.Add(1)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// isQueueRead says a request is a read-only transaction (a waiter's read
// of the queue).
func isQueueRead(method string, req any) bool {
	return method == "/etcdserverpb.KV/Txn" && !putTxn(method, req) && !deleteTxn(method, req)
}

// TestGovern_FailOpenOverEtcdGivesBackAnEntryWhosePutReplyWasLost: the
// transaction that puts the Acquire's entry is applied (taking the free
// lock, or queueing behind a holder), and then etcd becomes unreachable:
// its reply never comes, and the request timeout ends the wait for it.
// FailOpen grants a process-local lock. The entry stands meanwhile, on a
// lease nobody renews (TTL 10 min), as a holder to everyone else: once etcd
// is reachable again it must be given back, so that another process's
// waiter queued behind it gets the lock, and this process's next Acquire
// goes to etcd again.
func TestGovern_FailOpenOverEtcdGivesBackAnEntryWhosePutReplyWasLost(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	elsewhere := newLocker(t, admin)
	for _, tc := range lostAcquireCases {
		t.Run(tc.name, func(t *testing.T) {
			key := "lock:lost-put:" + tc.name
			// Past anything the test waits for, within Govern's TTL bounds.
			ttl := instrument.WithTTL(10 * time.Minute)
			p := testenv.NewProxy(t, strings.TrimPrefix(e.Endpoint(), "http://"))
			t.Cleanup(p.Reset)
			f := newLostReply(putTxn)
			f.afterLoss, f.withheld = p.HalfOpen, true
			l := newLocker(t, faultyClient(t, []string{"http://" + p.Addr()}, f), etcdlock.WithRequestTimeout(shortRequests))
			g := governEtcd(t, l, instrument.FailOpen)
			var holder instrument.Lease
			if tc.held {
				holder = mustAcquire(t, elsewhere, key, ttl)
			}
			f.arm()
			ctx := timeout(t, callerTime)
			local := degradedLease(t, acquiredNow(g.Acquire(ctx, key, append([]instrument.AcquireOption{ttl}, tc.opts...)...)), "Acquire whose put's reply was lost")
			if !isClosed(f.lost) {
				t.Fatal("no reply was lost: the fault did not hold")
			}
			ghost := f.lease.Load()
			if leaseGone(t, admin, ghost) {
				t.Fatal("the lost put's lease is gone although etcd could not be reached: the fault did not hold")
			}
			theirs := acquireInBackground(t, elsewhere, key, time.Minute, ttl)
			want := int64(2)
			if tc.held {
				want = 3
			}
			testenv.WaitFor(t, 10*time.Second, "another process's waiter to queue", func() bool { return queueLen(t, admin, l, key) == want })
			if holder != nil {
				mustRelease(t, holder)
			}
			mustRelease(t, local)
			p.Reset() // the client reconnects
			r := waitAcquired(t, theirs, time.Minute, "another process's waiter behind the lost put's entry, once etcd is reachable")
			if r.err != nil {
				t.Fatalf("another process's waiter behind the lost put's entry: %v", r.err)
			}
			if !leaseGone(t, admin, ghost) {
				t.Error("another process got the lock while the lost put's lease was live")
			}
			mustRelease(t, r.lease)
			again, err := g.Acquire(timeout(t, callerTime), key, ttl, instrument.FailFast())
			if err != nil || again.Fence() == 0 {
				t.Fatalf("Acquire once etcd is back: %v, %v; want a lease from etcd", again, err)
			}
			mustRelease(t, again)
			if n := g.degraded(t); n != 1 {
				t.Errorf("degraded = %v, want 1", n)
			}
		})
	}
}

// The Locker's WithRequestTimeout is refused when negative.
func TestNew_RefusesANegativeRequestTimeout(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	if _, err := etcdlock.New(c, etcdlock.WithRequestTimeout(-time.Second)); !errors.Is(err, instrument.ErrInvalidOption) {
		t.Fatalf("negative request timeout: %v, want ErrInvalidOption", err)
	}
	if _, err := etcdlock.New(c, etcdlock.WithRequestTimeout(0)); err != nil {
		t.Fatalf("request timeout 0: %v", err)
	}
}

// failPut answers every transaction that puts a key with err, without
// sending it, as a member does that cannot get it through raft.
type failPut struct{ err error }

func (f failPut) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if putTxn(method, req) {
		return f.err
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// TestAcquire_EtcdsCouldNotDecideAnswersAreAStoreFailure: etcd answers the
// put with codes.Unavailable (no leader, leader changed, request timed out,
// timed out due to a leader's failure): it could not decide the request,
// so the Acquire fails with a store failure that wraps etcd's answer, not
// ErrNotAcquired, even with no request timeout (0). Before, these were
// read as no store failure, and FailOpen never degraded on them. An answer
// that is a refusal (permission denied) is no store failure.
func TestAcquire_EtcdsCouldNotDecideAnswersAreAStoreFailure(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	for _, tc := range []struct {
		status, want error
		failure      bool
	}{
		{rpctypes.ErrGRPCNoLeader, rpctypes.ErrNoLeader, true},
		{rpctypes.ErrGRPCLeaderChanged, rpctypes.ErrLeaderChanged, true},
		{rpctypes.ErrGRPCTimeout, rpctypes.ErrTimeout, true},
		{rpctypes.ErrGRPCTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToLeaderFail, true},
		{rpctypes.ErrGRPCPermissionDenied, rpctypes.ErrPermissionDenied, false},
	} {
		t.Run(tc.want.Error(), func(t *testing.T) {
			l := newLocker(t, interceptedClient(t, e.Endpoints(), failPut{tc.status}.intercept), etcdlock.WithRequestTimeout(0))
			ctx := timeout(t, callerTime)
			lease, err := l.Acquire(ctx, "lock:answers", instrument.FailFast())
			if err == nil {
				_ = lease.Release(ctx)
				t.Fatal("a lease although every put failed")
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("%v, want it to wrap %v", err, tc.want)
			}
			if errors.Is(err, instrument.ErrNotAcquired) {
				t.Errorf("%v: ErrNotAcquired, but nobody was found holding the lock", err)
			}
			if got := storefail.Unavailable(err); got != tc.failure {
				t.Errorf("%v: store failure %t, want %t", err, got, tc.failure)
			}
		})
	}
}

// TestAcquire_AWaiterWhoseReadsFailForARequestTimeoutIsAStoreFailure: a
// waiter's reads of the queue fail with "no leader", one after another,
// for longer than the request timeout (a leader election keeps a waiter's
// place for shorter outages: TestAcquire_AWaiterKeepsItsPlaceWhenAQueueReadFails).
// Its caller's context has a hundred times that left: the wait ends with a
// store failure naming etcd's answer, not at the caller's deadline.
func TestAcquire_AWaiterWhoseReadsFailForARequestTimeoutIsAStoreFailure(t *testing.T) {
	t.Parallel()
	readsFailWhileQueued(t, "lock:reads-fail:", []etcdlock.Option{etcdlock.WithRequestTimeout(shortRequests)},
		func(t *testing.T, ctx context.Context, got <-chan acquired, h instrument.Lease, _ *failingReads) {
			defer mustRelease(t, h)
			r := <-got
			if r.err == nil {
				_ = r.lease.Release(timeout(t, 5*time.Second))
			}
			storeError(t, ctx, r.err, "the waiter whose reads failed")
			if !errors.Is(r.err, rpctypes.ErrNoLeader) {
				t.Errorf("%v, want it to wrap etcd's answer (no leader)", r.err)
			}
		})
}

// TestAcquire_AWaiterWhoseWatchEtcdDoesNotConfirmIsAStoreFailure: a
// waiter's put has queued it behind a holder when etcd becomes unreachable
// (the connection goes half-open right after the put's reply), so etcd
// never confirms the watch the waiter then asks for. Creating it is a
// round trip of the Acquire like the put: within the request timeout, and
// the caller's context still has a hundred times that, the Acquire fails
// with a store failure, in both wait modes, and its entry is given back
// once etcd is reachable again.
func TestAcquire_AWaiterWhoseWatchEtcdDoesNotConfirmIsAStoreFailure(t *testing.T) {
	t.Parallel()
	queuedWhenCut(t, "lock:watch-unconfirmed:", "the waiter's entry to be given back once etcd is reachable",
		[]etcdlock.Option{etcdlock.WithRequestTimeout(shortRequests)}, nil,
		func(t *testing.T, l *etcdlock.Locker, key string, cut *cutAfter) {
			ctx := timeout(t, callerTime)
			lease, err := l.Acquire(ctx, key)
			if err == nil {
				_ = lease.Release(bounded(time.Second))
			}
			if !isClosed(cut.done) {
				t.Fatalf("the connection did not go half-open after the put: %v", err)
			}
			storeError(t, ctx, err, "the waiter whose watch etcd did not confirm")
		})
}
