package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

func newSession(t *testing.T, c *clientv3.Client, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func fromMutex(t *testing.T, s *concurrency.Session, pfx string) *etcdlock.MutexLocker {
	t.Helper()
	m, err := etcdlock.FromMutex(s, pfx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A Lock that succeeds just before the caller's context ends, followed by a
// step that fails on that context, must not leave the Mutex key behind: the
// session's keepalive would keep it, and the key locked, for ever.
func TestFromMutex_FailureAfterASuccessfulLockUnlocksTheMutex(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	s := newSession(t, c, 30)
	m := fromMutex(t, s, "/after-lock/")
	other := fromMutex(t, newSession(t, c, 30), "/after-lock/")
	for _, tc := range []struct {
		name string
		opt  instrument.AcquireOption
	}{
		{"Lock", instrument.WaitUntilDeadline()},
		{"TryLock", instrument.FailFast()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(timeout(t, 10*time.Second))
			etcdlock.SetAfterLock(m, cancel) // the deadline hits right after Lock
			_, err := m.Acquire(ctx, tc.name, tc.opt)
			etcdlock.SetAfterLock(m, nil)
			if err == nil {
				t.Fatal("Acquire succeeded on a cancelled context")
			}
			// The delete runs inline for at most 100 ms after the caller's
			// end, then in the background: a loaded machine may see the
			// key a moment longer. The session keeps it alive, so only a
			// delete ends it.
			testenv.WaitFor(t, 30*time.Second, "the failed Acquire's Mutex key to be deleted", func() bool {
				resp, err := c.Get(timeout(t, 5*time.Second), "/after-lock/"+tc.name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err != nil {
					t.Fatal(err)
				}
				return resp.Count == 0
			})
			h, err := other.Acquire(timeout(t, 5*time.Second), tc.name, instrument.FailFast())
			if err != nil {
				t.Fatalf("another session cannot lock after the failed Acquire: %v", err)
			}
			if err := h.Release(timeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			// A background delete gives the key's in-process turn back just
			// after it, which the test may have seen first: wait.
			h, err = m.Acquire(timeout(t, 10*time.Second), tc.name)
			if err != nil {
				t.Fatalf("the same adapter cannot lock after the failed Acquire: %v", err)
			}
			if err := h.Release(timeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Release after the lease was lost deletes nothing: the compare on the
// create revision fails, and the next holder's key is another one anyway
// (a Mutex names its key after the session's lease).
func TestFromMutex_ReleaseAfterALossLeavesTheNextHoldersLock(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	sa := newSession(t, c, 30)
	ma, mb := fromMutex(t, sa, "/lost/"), fromMutex(t, newSession(t, c, 30), "/lost/")
	a, err := ma.Acquire(timeout(t, 5*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(timeout(t, 5*time.Second), sa.Lease()); err != nil {
		t.Fatal(err)
	}
	b, err := mb.Acquire(timeout(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("A's context live 10s after its session lease was revoked")
	}
	if err := a.Release(timeout(t, 5*time.Second)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Errorf("A's Release after the loss: %v, want ErrNotHeld", err)
	}
	if err := b.Refresh(timeout(t, 5*time.Second)); err != nil {
		t.Fatalf("B's lock after A's Release: %v", err)
	}
	if err := b.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// proxied returns a client that reaches e through a fault proxy.
func proxied(t *testing.T, e *testenv.Etcd) (*clientv3.Client, *testenv.Proxy) {
	t.Helper()
	p := testenv.NewProxy(t, strings.TrimPrefix(e.Endpoint(), "http://"))
	return testenv.NewEtcdClient(t, "http://"+p.Addr()), p
}

// waitReachable waits until c has reconnected after a fault.
func waitReachable(t *testing.T, c *clientv3.Client) {
	t.Helper()
	ctx := timeout(t, 20*time.Second)
	for {
		if _, err := c.Get(ctx, "reachable"); err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("client did not reconnect within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A watch that etcd cancels (here: resumed after a reconnect from a
// compacted revision) must not leave the lease blind: the deletion of the
// key afterwards still ends it.
func TestFromMutex_DeletionAfterItsWatchWasCompactedAwayEndsTheLease(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	c, p := proxied(t, e)
	m := fromMutex(t, newSession(t, c, 30), "/compacted/")
	h, err := m.Acquire(timeout(t, 5*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(timeout(t, 5*time.Second))
	// Move the store on and compact past the revision the watch started at;
	// then break the connection, so that the watch resumes from there.
	var rev int64
	for i := range 2 {
		resp, err := admin.Put(timeout(t, 5*time.Second), "/compacted/other", strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := admin.Compact(timeout(t, 5*time.Second), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	waitReachable(t, c)
	// The lease is still held: reading the key finds it ours.
	if err := h.Refresh(timeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Refresh after the reconnect: %v", err)
	}
	if _, err := admin.Delete(timeout(t, 5*time.Second), "/compacted/k/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("lease context live 20s after its key was deleted: the watch ended and nobody watches any more")
	}
	if !errors.Is(context.Cause(h.Context()), instrument.ErrLockLost) {
		t.Fatalf("cause: %v, want ErrLockLost", context.Cause(h.Context()))
	}
}

// While etcd is unreachable the holder's context ends at its local deadline,
// before etcd expires the session lease and hands the Mutex to another
// session.
func TestFromMutex_HolderCutOffFromEtcdIsCancelledBeforeAnotherSessionLocks(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	c, p := proxied(t, e)
	ma := fromMutex(t, newSession(t, c, 3), "/cutoff/")
	mb := fromMutex(t, newSession(t, e.Client(t), 30), "/cutoff/")
	a, err := ma.Acquire(timeout(t, 5*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	b, err := mb.Acquire(timeout(t, 30*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	if a.Context().Err() == nil {
		t.Error("B holds the Mutex while A's context is still live")
	} else if !errors.Is(context.Cause(a.Context()), instrument.ErrLockLost) {
		t.Errorf("A's cause: %v, want ErrLockLost", context.Cause(a.Context()))
	}
	if err := b.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(false)
	p.Reset()
	waitReachable(t, c)
	if err := a.Release(timeout(t, 10*time.Second)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Errorf("A's Release after the loss: %v, want ErrNotHeld", err)
	}
}

// A lease dropped without Release is released when it is collected, so the
// key (and the adapter's in-process turn) is free again.
func TestFromMutex_DroppedLeaseIsReleasedWhenCollected(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	m := fromMutex(t, newSession(t, c, 30), "/dropped/")
	func() {
		if _, err := m.Acquire(timeout(t, 5*time.Second), "k"); err != nil {
			t.Fatal(err)
		}
	}()
	waitCollectedAndFree(t, m, "k")
}

// A lost lease keeps its in-process turn until Release; dropped without
// Release it must still give it back when collected, or the key stays
// locked in this adapter for ever. The lease core releases only a live
// dropped lease.
func TestFromMutex_LostLeaseDroppedWithoutReleaseGivesItsTurnBack(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	m := fromMutex(t, newSession(t, c, 30), "/lost-dropped/")
	func() {
		h, err := m.Acquire(timeout(t, 5*time.Second), "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Delete(timeout(t, 5*time.Second), "/lost-dropped/k/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatal("lease context live 10s after its key was deleted")
		}
	}()
	waitCollectedAndFree(t, m, "k")
}

// The common `defer lease.Release(reqCtx)` runs on a context that has
// already ended. No TTL frees the Mutex key (the session's keepalive renews
// it), so that Release must still delete it: otherwise the next Acquire of
// the same adapter re-enters the key and hands out the same fence again,
// and every other session waits until the session ends.
func TestFromMutex_AReleaseOnAnEndedContextNeverRepeatsAFence(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	ma := fromMutex(t, newSession(t, e.Client(t), 30), "/ended-release/")
	mb := fromMutex(t, newSession(t, e.Client(t), 30), "/ended-release/")
	h1, err := ma.Acquire(timeout(t, 5*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	// The delete runs on 100 ms of its own, and in the background if a
	// loaded machine needs longer: then Release says DeadlineExceeded, and
	// the adapter keeps the key's turn until the delete is through.
	if err := h1.Release(ended); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Release on an ended context: %v", err)
	}
	h2, err := ma.Acquire(timeout(t, 10*time.Second), "k")
	if err != nil {
		t.Fatalf("the same adapter cannot lock after the Release: %v", err)
	}
	if h2.Fence() <= h1.Fence() {
		t.Errorf("the next holder's fence %d is not above the previous holder's %d", h2.Fence(), h1.Fence())
	}
	if err := h2.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	hb, err := mb.Acquire(timeout(t, 5*time.Second), "k", instrument.FailFast())
	if err != nil {
		t.Fatalf("another session cannot lock after the Release: %v", err)
	}
	if err := hb.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// A Release whose delete does not reach etcd leaves the key standing, kept
// alive by the session. The adapter must not give the key's turn back
// while that is so (its next Acquire would re-enter the key with the same
// fence), and must delete the key once etcd can be reached again, rather
// than leave it locked for every other session until the session ends.
func TestFromMutex_AReleaseThatDoesNotReachEtcdIsRetriedAndNeverRepeatsAFence(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	c, p := proxied(t, e)
	ma := fromMutex(t, newSession(t, c, 10), "/unreached/")
	mb := fromMutex(t, newSession(t, e.Client(t), 30), "/unreached/")
	h1, err := ma.Acquire(timeout(t, 5*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	p.HalfOpen() // nothing sent on the client's connection arrives any more
	if err := h1.Release(timeout(t, 300*time.Millisecond)); err == nil {
		t.Fatal("Release succeeded over a half-open connection")
	}
	// The key may stand: nobody takes it, this adapter included.
	if h, err := ma.Acquire(timeout(t, time.Second), "k", instrument.FailFast()); err == nil {
		t.Errorf("the same adapter locked again (fence %d, the failed holder's %d) while the failed holder's key may stand", h.Fence(), h1.Fence())
		_ = h.Release(timeout(t, 5*time.Second))
	}
	p.Reset() // the client reconnects
	hb, err := mb.Acquire(timeout(t, 10*time.Second), "k")
	if err != nil {
		t.Fatalf("another session cannot lock once etcd is reachable again: %v", err)
	}
	if hb.Fence() <= h1.Fence() {
		t.Errorf("the next holder's fence %d is not above the failed holder's %d", hb.Fence(), h1.Fence())
	}
	if err := hb.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	h2, err := ma.Acquire(timeout(t, 10*time.Second), "k")
	if err != nil {
		t.Fatalf("the same adapter cannot lock after the retried delete: %v", err)
	}
	if h2.Fence() <= hb.Fence() {
		t.Errorf("the same adapter's next fence %d is not above the previous holder's %d", h2.Fence(), hb.Fence())
	}
	if err := h2.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// Whatever left this session's Mutex key standing after its holder's turn
// ended, a Mutex that re-enters it gets the key's old create revision: the
// adapter must not hand that fence out again, but delete the key and lock
// anew.
func TestFromMutex_ALockThatReentersAStandingKeyIsNotHandedItsFenceAgain(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	s := newSession(t, c, 30)
	m := fromMutex(t, s, "/reentered/")
	// The key of a holder whose delete never got through.
	own := fmt.Sprintf("/reentered/k/%x", s.Lease())
	resp, err := c.Put(timeout(t, 5*time.Second), own, "", clientv3.WithLease(s.Lease()))
	if err != nil {
		t.Fatal(err)
	}
	left := resp.Header.Revision
	etcdlock.SetIssued(m, "k", left)
	h, err := m.Acquire(timeout(t, 5*time.Second), "k", instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	if h.Fence() <= uint64(left) {
		t.Errorf("fence %d handed out again (the standing key's is %d)", h.Fence(), left)
	}
	if err := h.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// A lease dropped while held is released by the lease core when it is
// collected. When that release's delete fails (here etcd refuses the
// session's writes for a while; its keepalive goes on), the Mutex key
// stands, and the adapter must keep the key's turn until a retry deletes
// it: the handle's cleanup, which then finds the lease already released,
// once took that for "the key is gone" and gave the turn back, and the next
// Acquire re-entered the standing key with the dropped holder's fence.
func TestFromMutex_ADroppedLeaseWhoseReleaseFailsKeepsTheKeyUntilItIsDeleted(t *testing.T) {
	t.Parallel()
	const pfx = "/dropped-failed/"
	e := testenv.NewEtcd(t, testenv.WithEtcdUser("app", "pw", pfx))
	root := e.Client(t)
	cfg := e.ClientConfig(nil)
	cfg.Username, cfg.Password = "app", "pw"
	app, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	m := fromMutex(t, newSession(t, app, 30), pfx)
	grant := func(p clientv3.PermissionType) {
		t.Helper()
		if _, err := root.RoleGrantPermission(timeout(t, 5*time.Second), "app-role", pfx, clientv3.GetPrefixRangeEnd(pfx), p); err != nil {
			t.Fatal(err)
		}
	}

	var leaked atomic.Int32
	var fence uint64
	func() {
		acfg, err := instrument.ApplyAcquireOptions()
		if err != nil {
			t.Fatal(err)
		}
		acfg.Observer = instrument.ObserverFuncs{OnLeaked: func() { leaked.Add(1) }}
		h, err := m.Acquire(timeout(t, 5*time.Second), "k", instrument.WithConfig(acfg))
		if err != nil {
			t.Fatal(err)
		}
		fence = h.Fence()
	}()
	grant(clientv3.PermissionType(clientv3.PermRead)) // the leaked release's delete fails
	deadline := time.Now().Add(20 * time.Second)
	for leaked.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the dropped lease was not collected in 20s")
		}
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	// The handle's cleanup runs once the core has ended the lease. This
	// pause only gives the old code the time to free the turn; with the
	// fix the outcome does not depend on it.
	time.Sleep(300 * time.Millisecond)
	grant(clientv3.PermissionType(clientv3.PermReadWrite))

	h, err := m.Acquire(timeout(t, 5*time.Second), "k", instrument.FailFast())
	if err != nil {
		if !errors.Is(err, instrument.ErrNotAcquired) {
			t.Fatal(err)
		}
		// The turn is kept while the key may stand; the retry deletes it.
		h, err = m.Acquire(timeout(t, 10*time.Second), "k")
		if err != nil {
			t.Fatalf("the key was never freed after etcd accepted writes again: %v", err)
		}
	}
	defer func() { _ = h.Release(timeout(t, 5*time.Second)) }()
	if h.Fence() <= fence {
		t.Fatalf("fence %d handed out after the dropped holder's %d", h.Fence(), fence)
	}
}

// TestFromMutex_ARefusedTurnOnAnEndedContextCarriesTheCause (h108): an
// Acquire of a key whose in-process turn another holder of the same
// adapter has is refused without a request to etcd. Refused on a context
// that has ended (its deadline passed, even before its timer fired, or
// cancelled with a cause), the error must say so as every other failed
// attempt of etcdlock and redislock does: ErrNotAcquired with the
// context's cause, so errors.Is(err, context.DeadlineExceeded) holds and
// Govern and callers read the caller's end, not a holder. Refused on a live
// context it stays plain ErrNotAcquired.
func TestFromMutex_ARefusedTurnOnAnEndedContextCarriesTheCause(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	m := fromMutex(t, newSession(t, c, 30), "/refused-turn/")
	const key = "held-in-process"
	holder, err := m.Acquire(timeout(t, 10*time.Second), key, instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Release(timeout(t, 10*time.Second)) }()

	errGaveUp := errors.New("caller gave up")
	contexts := []struct {
		name  string
		ctx   func(t *testing.T) context.Context
		cause error // nil: a live context
	}{
		{"live", func(t *testing.T) context.Context { return timeout(t, time.Minute) }, nil},
		{"deadline-passed", func(t *testing.T) context.Context {
			ctx, cancel := context.WithDeadline(timeout(t, time.Minute), time.Now().Add(-time.Second))
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded},
		{"deadline-passed-timer-not-fired", func(t *testing.T) context.Context {
			return testenv.DeadlinePassed(t, timeout(t, time.Minute), time.Minute)
		}, context.DeadlineExceeded},
		{"cancelled-with-cause", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancelCause(timeout(t, time.Minute))
			cancel(errGaveUp)
			return ctx
		}, errGaveUp},
	}
	waits := []struct {
		name string
		opt  instrument.AcquireOption
	}{
		{"fail-fast", instrument.FailFast()},
		{"retry-once", instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 1)},
		{"retry-3", instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 3)},
	}
	for _, cc := range contexts {
		for _, w := range waits {
			t.Run(cc.name+"/"+w.name, func(t *testing.T) {
				lease, err := m.Acquire(cc.ctx(t), key, w.opt)
				if err == nil {
					_ = lease.Release(timeout(t, 10*time.Second))
					t.Fatal("acquired a key whose in-process turn another holder has")
				}
				if !errors.Is(err, instrument.ErrNotAcquired) {
					t.Fatalf("%v; want ErrNotAcquired", err)
				}
				if cc.cause == nil {
					if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
						t.Fatalf("%v: a context's end on a live context", err)
					}
					return
				}
				if !errors.Is(err, cc.cause) {
					t.Fatalf("%v; want ErrNotAcquired with the context's cause %q", err, cc.cause)
				}
			})
		}
	}
}
