package etcdlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// mutexPaths are the places a FromMutex Acquire meets an unreachable etcd:
// TryLock's transaction (FailFast, Retry), Mutex.Lock's transaction on a
// free key, and Mutex.Lock's wait behind another session's holder (its
// watch on a connection that no longer answers, which nothing ends).
var mutexPaths = []struct {
	name string
	held bool
	opts []instrument.AcquireOption
}{
	{"fail-fast", false, []instrument.AcquireOption{instrument.FailFast()}},
	{"retry", false, []instrument.AcquireOption{instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 3)}},
	{"wait/free", false, nil},
	{"wait/held", true, []instrument.AcquireOption{instrument.WithPollInterval(50 * time.Millisecond)}},
}

// TestGovern_FromMutexWithARequestTimeoutMakesAnUnreachableEtcdAStoreFailure:
// a FromMutex adapter given WithRequestTimeout, etcd partitioned or killed
// while its Acquire talks to it or waits, and a caller with a hundred times
// that timeout left. Without the bound, concurrency.Mutex waits for the
// caller's end (its put, reads and wait run on one context) and the
// Acquire returned ErrNotAcquired then: FailOpen never degraded over
// FromMutex. With it, FailClosed returns a store failure while the caller
// still has time and FailOpen grants a process-local lock; the session's
// Mutex key, if the put got through, is deleted once etcd is back, and the
// key can be locked again from both sessions.
func TestGovern_FromMutexWithARequestTimeoutMakesAnUnreachableEtcdAStoreFailure(t *testing.T) {
	t.Parallel()
	for _, fault := range etcdFaults {
		for _, path := range mutexPaths {
			for _, policy := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
				t.Run(fault.name+"/"+path.name+"/"+policy.String(), func(t *testing.T) {
					t.Parallel()
					e := testenv.NewEtcd(t)
					admin := e.Client(t)
					c, p := proxied(t, e)
					pfx := "/mutex-outage/"
					const key = "k"
					// A session TTL the test never outlives.
					s := newSession(t, c, 600)
					t.Cleanup(func() { // before the session's Close, whose revoke would wait for etcd
						p.Reset()
						if !e.Running() {
							_ = e.Restart()
						}
					})
					m, err := etcdlock.FromMutex(s, pfx, etcdlock.WithRequestTimeout(shortRequests))
					if err != nil {
						t.Fatal(err)
					}
					other := fromMutex(t, newSession(t, admin, 600), pfx)
					g := governEtcd(t, m, policy)
					waitReachable(t, c)
					var holder instrument.Lease
					var got <-chan acquired
					if path.held {
						holder = mustAcquire(t, other, key)
						got = acquireInBackground(t, g, key, callerTime, path.opts...)
						testenv.WaitFor(t, 10*time.Second, "this session's Mutex key to queue", func() bool {
							return mutexKeys(t, admin, pfx, key, s) == 1
						})
					}
					fault.cut(e, p)
					ctx := timeout(t, callerTime)
					if got == nil {
						got = acquireInBackground(t, g, key, callerTime, path.opts...)
					}
					r := waitAcquired(t, got, 2*callerTime, "the adapter's Acquire in the outage")
					if policy == instrument.FailClosed {
						if r.err == nil {
							_ = r.lease.Release(bounded(time.Second))
						}
						storeError(t, ctx, r.err, "the adapter's Acquire")
					} else {
						lease := degradedLease(t, r, "the adapter's Acquire")
						if n := g.degraded(t); n != 1 {
							t.Errorf("degraded = %v, want 1", n)
						}
						mustRelease(t, lease)
					}
					if fault.name == "killed" {
						if err := e.Restart(); err != nil {
							t.Fatal(err)
						}
					}
					p.Reset() // the client reconnects
					testenv.WaitFor(t, callerTime, "this session's Mutex key to be gone once etcd is back", func() bool {
						return mutexKeys(t, admin, pfx, key, s) == 0
					})
					mutexIsFree(t, key, "the Acquire failed in the outage", holder, other, m)
				})
			}
		}
	}
}

// FromMutex takes WithRequestTimeout (0, and a negative one refused, as
// New) and no other Option: the Mutex's key prefix and value are its own.
func TestFromMutex_TakesOnlyARequestTimeout(t *testing.T) {
	t.Parallel()
	s := newSession(t, testenv.NewEtcd(t).Client(t), 10)
	if _, err := etcdlock.FromMutex(s, "/opts/", etcdlock.WithRequestTimeout(time.Second)); err != nil {
		t.Fatalf("WithRequestTimeout: %v", err)
	}
	if _, err := etcdlock.FromMutex(s, "/opts/", etcdlock.WithRequestTimeout(0)); err != nil {
		t.Fatalf("WithRequestTimeout(0): %v", err)
	}
	for name, opt := range map[string]etcdlock.Option{
		"negative request timeout": etcdlock.WithRequestTimeout(-time.Second),
		"WithPrefix":               etcdlock.WithPrefix("other/"),
		"WithService":              etcdlock.WithService("svc"),
	} {
		if _, err := etcdlock.FromMutex(s, "/opts/", opt); !errors.Is(err, instrument.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}

// TestGovern_FromMutexOverASlowEtcdWithinTheRequestTimeoutWaitsForTheHolder:
// the probes that stand in for a request timeout in Mutex.Lock's wait must
// not end a wait on an etcd that answers, slowly but within the bound: a
// FromMutex waiter behind another session's holder, every round trip 40 ms
// or more, waits through several probes (the poll interval, half the
// bound), and gets the lock with a fence when the holder releases, under
// FailOpen and FailClosed, without degrading.
func TestGovern_FromMutexOverASlowEtcdWithinTheRequestTimeoutWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	waitsOnASlowEtcd(t, slowWaiter{
		what:    "probe etcd",
		counted: isProbe,
		lockers: func(t *testing.T, c, admin *clientv3.Client, name string, bound time.Duration) (instrument.Locker, instrument.Locker, func()) {
			pfx := "/mutex-slow/" + name + "/"
			m, err := etcdlock.FromMutex(newSession(t, c, 600), pfx, etcdlock.WithRequestTimeout(bound))
			if err != nil {
				t.Fatal(err)
			}
			return m, fromMutex(t, newSession(t, admin, 600), pfx), func() {}
		},
	})
}

// isProbe says a request is a count-only range read (a FromMutex waiter's
// probe).
func isProbe(_ string, req any) bool {
	r, ok := req.(*etcdserverpb.RangeRequest)
	return ok && r.CountOnly
}

// countGets counts count-only range reads (a FromMutex waiter's probes),
// and those etcd answered codes.Unavailable (no leader, request timed out,
// leader changed: clientv3 sends such a read again within its context).
type countGets struct{ n, unavailable atomic.Int64 }

func (c *countGets) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !isProbe(method, req) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	c.n.Add(1)
	err := invoker(ctx, method, req, reply, cc, opts...)
	if status.Code(err) == codes.Unavailable {
		c.unavailable.Add(1)
	}
	return err
}
