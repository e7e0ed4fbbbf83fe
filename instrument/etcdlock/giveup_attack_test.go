package etcdlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
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
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	other := newLocker(t, admin)
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			key := "lease-ends-unreachable/" + mode.name
			p := testenv.NewProxy(t, strings.TrimPrefix(e.Endpoint(), "http://"))
			cut := newCutAfter(putTxn, p.HalfOpen)
			l := inWaitMode(newLocker(t, interceptedClient(t, []string{"http://" + p.Addr()}, cut.intercept)), mode.max)
			holder, err := other.Acquire(timeout(t, 10*time.Second), key, instrument.WithTTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			cut.arm()
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
			p.Reset() // the client reconnects
			testenv.WaitFor(t, 30*time.Second, "the waiter's entry to go (its lease expired)", func() bool {
				return queueLen(t, admin, other, key) == 1
			})
			if err := holder.Release(timeout(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			lockIsFree(t, key, other, l)
		})
	}
}
