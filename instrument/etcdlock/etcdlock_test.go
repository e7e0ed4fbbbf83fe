package etcdlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// soleHolder checks, across goroutines, that one holder at a time holds the
// lock and that each holder's fence is above the previous holder's.
type soleHolder struct {
	holders atomic.Int32
	mu      sync.Mutex
	last    uint64
}

// enter is a holder's first step after Acquire returned lease.
func (s *soleHolder) enter(t *testing.T, lease instrument.Lease) {
	t.Helper()
	if n := s.holders.Add(1); n != 1 {
		t.Errorf("%d holders at once", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := lease.Fence(); f <= s.last {
		t.Errorf("fence %d not above the previous holder's %d", f, s.last)
	} else {
		s.last = f
	}
}

// leave is a holder's last step before Release.
func (s *soleHolder) leave() { s.holders.Add(-1) }

// acquired is the outcome of an Acquire run in the background.
type acquired struct {
	lease instrument.Lease
	err   error
}

// watchOnly is a waiter whose handoff can only come from a watch: a TTL the
// test outlives and an hour between polls.
var watchOnly = []instrument.AcquireOption{instrument.WithTTL(30 * time.Second), instrument.WithPollInterval(time.Hour)}

// acquireInBackground runs l.Acquire(key) within d in a goroutine of its own
// and returns its outcome's channel.
func acquireInBackground(t *testing.T, l instrument.Locker, key string, d time.Duration, opts ...instrument.AcquireOption) <-chan acquired {
	ctx := timeout(t, d)
	got := make(chan acquired, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, opts...)
		got <- acquired{lease, err}
	}()
	return got
}

// newestEntry waits until key's queue has n entries and returns the newest
// (the last waiter's).
func newestEntry(t *testing.T, c *clientv3.Client, l *etcdlock.Locker, key string, n int64) *mvccpb.KeyValue {
	t.Helper()
	for queueLen(t, c, l, key) != n {
		time.Sleep(2 * time.Millisecond)
	}
	resp, err := c.Get(timeout(t, 5*time.Second), l.QueuePrefix(key), append(clientv3.WithLastCreate(), clientv3.WithPrefix())...)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the newest queue entry: %v %v", err, resp)
	}
	return resp.Kvs[0]
}

// waitWatching waits until n waits of l have their first watch in place
// (etcdlock.Watching), for at most 10 s.
func waitWatching(t *testing.T, l *etcdlock.Locker, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for etcdlock.Watching(l) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waits watching after 10 s, want %d", etcdlock.Watching(l), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitRevokesDone waits until l's background revoker has given up every
// lease handed to it, for at most 30 s. An Acquire that gives up revokes its
// lease inline only while its caller's context has time left or for
// cleanupGrace (100 ms) after it ended, and leaves the rest to that
// revoker: on a loaded machine a give-up's entry may outlive its Acquire
// briefly, but not the revoker's work.
func waitRevokesDone(t *testing.T, l *etcdlock.Locker) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "the Locker's background revokes to be done", func() bool {
		return etcdlock.RevokesPending(l) == 0
	})
}

// queueLen counts the entries in key's queue.
func queueLen(t *testing.T, c *clientv3.Client, l *etcdlock.Locker, key string) int64 {
	resp, err := c.Get(timeout(t, 5*time.Second), l.QueuePrefix(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

func TestNew_RefusesNilClientAndEmptyPrefix(t *testing.T) {
	t.Parallel()
	if _, err := etcdlock.New(nil); !errors.Is(err, instrument.ErrInvalidOption) {
		t.Fatalf("nil client: %v", err)
	}
	c := testenv.NewEtcd(t).Client(t)
	if _, err := etcdlock.New(c, etcdlock.WithPrefix("")); !errors.Is(err, instrument.ErrInvalidOption) {
		t.Fatalf("empty prefix: %v", err)
	}
}

func TestAcquire_WaitersAcquireInTheOrderTheyQueued(t *testing.T) {
	t.Parallel()
	for _, mode := range waitModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			c := testenv.NewEtcd(t).Client(t)
			l := inWaitMode(newLocker(t, c), mode.max)
			const key, n = "fifo", 10
			h, err := l.Acquire(timeout(t, 5*time.Second), key)
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu    sync.Mutex
				order []int
				wg    sync.WaitGroup
			)
			for i := range n {
				wg.Go(func() {
					lease, err := l.Acquire(timeout(t, 30*time.Second), key)
					if err != nil {
						t.Errorf("waiter %d: %v", i, err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					_ = lease.Release(timeout(t, 5*time.Second))
				})
				// The next waiter starts only once this one has queued.
				for queueLen(t, c, l, key) != int64(i+2) {
					time.Sleep(2 * time.Millisecond)
				}
			}
			if err := h.Release(timeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for i, w := range order {
				if w != i {
					t.Fatalf("acquisition order %v, want 0..%d", order, n-1)
				}
			}
			// Waiter i had i+1 entries ahead of it.
			want := int64(n)
			if mode.max >= 0 {
				want = min(mode.max, n)
			}
			if got := etcdlock.QueueWatches(l); got != want {
				t.Fatalf("%d waits watched the whole queue, want %d", got, want)
			}
		})
	}
}

func TestWaiter_StopsWithErrorWhenItsOwnSessionEnds(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	l := newLocker(t, c)
	const key = "waiter-session"
	h, err := l.Acquire(timeout(t, 5*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(timeout(t, 5*time.Second))
	got := make(chan error, 1)
	go func() {
		_, err := l.Acquire(timeout(t, 30*time.Second), key)
		got <- err
	}()
	// End the waiter's session: revoke the lease of the second entry.
	if _, err := c.Revoke(timeout(t, 5*time.Second), clientv3.LeaseID(newestEntry(t, c, l, key, 2).Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, instrument.ErrLockLost) {
			t.Fatalf("waiter whose session ended: %v, want ErrLockLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter still waiting 10s after its session ended")
	}
	if err := h.Context().Err(); err != nil {
		t.Fatalf("holder affected: %v", context.Cause(h.Context()))
	}
}

// fencedStore accepts a write only with a fence at least as large as every
// fence it has seen: the protected resource of the fencing pattern.
type fencedStore struct {
	mu  sync.Mutex
	max uint64
}

func (s *fencedStore) write(fence uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.max {
		return false
	}
	s.max = fence
	return true
}

func TestLeaderKilled_LeaseSurvivesOrHolderIsCancelledFirst(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("3-member cluster in -short")
	}
	cl := testenv.NewEtcdCluster(t, 3)
	la := newLocker(t, cl.Client(t))
	lb := newLocker(t, cl.Client(t))
	const key = "leader-kill"
	a, err := la.Acquire(timeout(t, 10*time.Second), key, instrument.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var aDone atomic.Int64
	stop := context.AfterFunc(a.Context(), func() { aDone.Store(time.Now().UnixNano()) })
	defer stop()

	store := &fencedStore{}
	var aAccepted, bAccepted atomic.Int64
	writerDone := make(chan struct{})
	go func() { // A writes while its context says it holds the lock
		defer close(writerDone)
		for a.Context().Err() == nil {
			if store.write(a.Fence()) {
				aAccepted.Store(time.Now().UnixNano())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	old, err := cl.StopLeader()
	if err != nil {
		t.Fatal(err)
	}
	b, err := lb.Acquire(timeout(t, 6*time.Second), key, instrument.WithTTL(2*time.Second))
	bAt := time.Now().UnixNano()
	if err == nil {
		if store.write(b.Fence()) {
			bAccepted.Store(time.Now().UnixNano())
		}
		if b.Fence() <= a.Fence() {
			t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
		}
		if d := aDone.Load(); d == 0 || d > bAt {
			t.Fatalf("B acquired while A's context was still live (A done at %d, B at %d)", d, bAt)
		}
		_ = b.Release(timeout(t, 5*time.Second))
	} else if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("B: %v", err)
	} else if a.Context().Err() != nil {
		t.Fatalf("A lost the lock (%v) but B could not take it", context.Cause(a.Context()))
	} else {
		t.Logf("lease survived the leader change (leader was member %d)", old)
	}
	_ = a.Release(timeout(t, 5*time.Second))
	<-writerDone
	if b := bAccepted.Load(); b != 0 && aAccepted.Load() > b {
		t.Fatalf("A's fenced write was accepted after B's")
	}
	if err := cl.Members[old].Restart(); err != nil {
		t.Fatal(err)
	}
}

func TestFromMutex_SharedSessionGoroutinesNeverBothHold(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	s, err := concurrency.NewSession(c, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	m, err := etcdlock.FromMutex(s, "/mutex/")
	if err != nil {
		t.Fatal(err)
	}
	g := instrument.Govern(m)
	var sole soleHolder
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				lease, err := g.Acquire(timeout(t, 20*time.Second), "k")
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				sole.enter(t, lease) // goroutines sharing one Session
				sole.leave()
				if err := lease.Release(timeout(t, 5*time.Second)); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	// FailFast while held by another session.
	s2, err := concurrency.NewSession(c, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	m2, _ := etcdlock.FromMutex(s2, "/mutex/")
	h, err := m.Acquire(timeout(t, 5*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Acquire(timeout(t, 5*time.Second), "k", instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("FailFast on a held Mutex: %v", err)
	}
	if err := h.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// A stock concurrency.Mutex names its entry after the Session's lease, so a
// second Mutex on the same key and Session finds "its own" entry first in
// line and returns from Lock at once; FromMutex keeps the second goroutine
// waiting until the first releases.
func TestSharedSession_StockMutexLetsTwoGoroutinesHoldAtOnceButFromMutexDoesNot(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	s, err := concurrency.NewSession(c, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	first := concurrency.NewMutex(s, "/stock/k")
	if err := first.Lock(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { second <- concurrency.NewMutex(s, "/stock/k").Lock(timeout(t, 5*time.Second)) }()
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("stock Mutex, second Lock: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("stock Mutex no longer lets a second goroutine on the same Session in; the adapter's in-process exclusion may be moot")
	}
	if err := first.Unlock(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}

	m, err := etcdlock.FromMutex(s, "/adapted/")
	if err != nil {
		t.Fatal(err)
	}
	h, err := m.Acquire(timeout(t, 5*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan instrument.Lease, 1)
	go func() {
		lease, err := m.Acquire(timeout(t, 10*time.Second), "k")
		if err != nil {
			t.Errorf("FromMutex, second Acquire after the release: %v", err)
		}
		got <- lease
	}()
	select {
	case <-got:
		t.Fatal("FromMutex let a second goroutine on the same Session hold the lock")
	case <-time.After(500 * time.Millisecond):
	}
	if err := h.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if lease := <-got; lease != nil {
		if err := lease.Release(timeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLockValue_CarriesHolderMetadataAndFenceIsCreateRevision(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	l := newLocker(t, c, etcdlock.WithService("payments"), etcdlock.WithInstance("pod-7"))
	const key = "lock:meta"
	h, err := l.Acquire(timeout(t, 5*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	w := make(chan instrument.Lease, 1)
	go func() {
		lease, err := l.Acquire(timeout(t, 10*time.Second), key, instrument.WithMeta(map[string]string{"order": "42"}))
		if err != nil {
			t.Error(err)
		}
		w <- lease
	}()
	for queueLen(t, c, l, key) != 2 {
		time.Sleep(2 * time.Millisecond)
	}
	if err := h.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	lease := <-w
	if lease == nil {
		t.FailNow()
	}
	defer lease.Release(timeout(t, 5*time.Second))
	var v struct {
		Service    string            `json:"service"`
		Instance   string            `json:"instance"`
		PID        int               `json:"pid"`
		Labels     map[string]string `json:"labels"`
		QueuedAt   int64             `json:"queued_at_ms"`
		AcquiredAt int64             `json:"acquired_at_ms"`
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := c.Get(timeout(t, 5*time.Second), l.QueuePrefix(key), clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("queue: %v %v", err, resp)
		}
		kv := resp.Kvs[0]
		if uint64(kv.CreateRevision) != lease.Fence() {
			t.Fatalf("fence %d, create revision %d", lease.Fence(), kv.CreateRevision)
		}
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			t.Fatalf("value %q: %v", kv.Value, err)
		}
		if v.AcquiredAt != 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v.Service != "payments" || v.Instance != "pod-7" || v.PID != os.Getpid() || v.Labels["order"] != "42" {
		t.Fatalf("value %+v", v)
	}
	if v.QueuedAt == 0 || v.AcquiredAt < v.QueuedAt {
		t.Fatalf("queued_at_ms %d, acquired_at_ms %d", v.QueuedAt, v.AcquiredAt)
	}
}

// A waiter that reuses a pooled lease records in the lock value, once it
// holds the lock, the time it queued: not when its lease was last renewed,
// which for a pooled lease is before the waiter even called Acquire.
func TestLockValue_APooledLeasesWaiterRecordsWhenItQueued(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	l, gate := newLocker(t, c), newLocker(t, c)
	ttl := instrument.WithTTL(30 * time.Second)
	h, err := l.Acquire(timeout(t, 5*time.Second), "pooled", ttl)
	if err != nil {
		t.Fatal(err)
	}
	pooled := newestEntry(t, c, l, "pooled", 1).Lease
	if err := h.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// The property is about time itself: the pooled lease was last
	// confirmed at its grant, and the waiter queues well after that.
	time.Sleep(1500 * time.Millisecond)
	g, err := gate.Acquire(timeout(t, 5*time.Second), "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got := acquireInBackground(t, l, "k", 10*time.Second, ttl)
	if lease := newestEntry(t, c, l, "k", 2).Lease; lease != pooled {
		t.Fatalf("the waiter's lease %x is not the pooled one %x", lease, pooled)
	}
	after := time.Now()
	if err := g.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.lease.Release(timeout(t, 5*time.Second))
	// The value with acquired_at is written once the lock has been held
	// for 100 ms.
	ctx := timeout(t, 5*time.Second)
	for {
		resp, err := c.Get(ctx, l.QueuePrefix("k"), clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("queue: %v %v", err, resp)
		}
		v := etcdlock.DecodeValue(resp.Kvs[0].Value)
		if v.AcquiredAt.IsZero() {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if v.QueuedAt.Before(before.Truncate(time.Millisecond)) || v.QueuedAt.After(after) {
			t.Errorf("queued_at %v is not between the waiter's Acquire (%v) and its entry's appearance (%v): %s",
				v.QueuedAt, before, after, resp.Kvs[0].Value)
		}
		return
	}
}

// A released lock's lease is pooled and its next lock on the same key puts
// the same entry key again; a watch served by a member lagging behind that
// put replays the previous entry's deletion, which must not read as a loss
// of the new entry (nor as the release of a predecessor).
func TestContention_ThreeMemberCluster_ReusedLeaseEntryIsNotMistakenForItsPredecessor(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("3-member cluster in -short")
	}
	cl := testenv.NewEtcdCluster(t, 3)
	leader, err := cl.Leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range waitModes {
		t.Run(mode.name, func(t *testing.T) {
			contendOnLaggingWatches(t, cl, leader, mode.max)
		})
	}
}

func contendOnLaggingWatches(t *testing.T, cl *testenv.EtcdCluster, leader int, max int64) {
	const key, workers, total = "contended", 8, 200
	lockers := make([]*etcdlock.Locker, workers)
	for i := range lockers {
		// A client's watches share one stream on one member while its other
		// requests go round-robin; pin that split: writes and reads on the
		// leader, watches on a follower, which applies each write a little
		// after the leader has answered it.
		follower := (leader + 1 + i%2) % 3
		c := testenv.NewEtcdClient(t, cl.Members[leader].Endpoint())
		c.Watcher = testenv.NewEtcdClient(t, cl.Members[follower].Endpoint()).Watcher
		lockers[i] = inWaitMode(newLocker(t, c), max)
	}
	var (
		left atomic.Int64
		sole soleHolder
		wg   sync.WaitGroup
	)
	left.Store(total)
	for _, l := range lockers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				lease, err := l.Acquire(timeout(t, 30*time.Second), key, instrument.WithTTL(10*time.Second))
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				sole.enter(t, lease)
				time.Sleep(time.Millisecond) // the hold
				sole.leave()
				if err := lease.Release(timeout(t, 5*time.Second)); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// laggingWatcher serves watches the way a member lag revisions behind the
// leader does: a watch from "now" starts, and its created response says it
// starts, lag revisions back, so it replays what happened in between.
type laggingWatcher struct {
	clientv3.Watcher
	kv  clientv3.KV
	lag int64
}

// withLaggingWatches makes c's watches lag revisions behind its writes.
func withLaggingWatches(c *clientv3.Client, lag int64) *clientv3.Client {
	c.Watcher = &laggingWatcher{Watcher: c.Watcher, kv: c.KV, lag: lag}
	return c
}

func (w *laggingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if clientv3.OpGet(key, opts...).Rev() != 0 {
		return w.Watcher.Watch(ctx, key, opts...)
	}
	resp, err := w.kv.Get(ctx, "lag-probe", clientv3.WithKeysOnly())
	if err != nil {
		return w.Watcher.Watch(ctx, key, opts...)
	}
	start := max(resp.Header.Revision-w.lag+1, 1)
	in := w.Watcher.Watch(ctx, key, append(opts, clientv3.WithRev(start))...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			if wr.Created {
				wr.Header.Revision = start - 1
			}
			select {
			case out <- wr:
			case <-ctx.Done():
			}
		}
	}()
	return out
}

// A released lock's lease is reused, so its next entry on the key has the
// same name; the deletion of the previous entry, replayed by a watch on a
// lagging member, is not the loss of the new one.
func TestAcquire_ReusedLeaseEntrySurvivesAReplayOfItsPreviousDeletion(t *testing.T) {
	t.Parallel()
	c := withLaggingWatches(testenv.NewEtcd(t).Client(t), 3)
	l := newLocker(t, c)
	const key = "reuse-own"
	first, err := l.Acquire(timeout(t, 5*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	h, err := l.Acquire(timeout(t, 5*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(timeout(t, 5*time.Second))
	// A replayed event reaches a watch from an old revision within etcd's
	// 100 ms resync.
	select {
	case <-h.Context().Done():
		t.Fatalf("lease of a held lock ended: %v", context.Cause(h.Context()))
	case <-time.After(500 * time.Millisecond):
	}
}

// A waiter whose predecessor's entry reuses a lease must not take the
// deletion of that lease's previous entry, replayed by a lagging member, for
// the predecessor's release: that would make two holders.
func TestWaiter_DoesNotTakeOverOnAReplayedDeletionOfItsPredecessorsReusedEntry(t *testing.T) {
	t.Parallel()
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			c := withLaggingWatches(testenv.NewEtcd(t).Client(t), 3)
			la, lb := newLocker(t, c), inWaitMode(newLocker(t, c), mode.max)
			const key = "reuse-pred"
			first, err := la.Acquire(timeout(t, 5*time.Second), key)
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Release(timeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			a, err := la.Acquire(timeout(t, 5*time.Second), key)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			var b instrument.Lease
			go func() {
				var err error
				b, err = lb.Acquire(timeout(t, 10*time.Second), key)
				got <- err
			}()
			select {
			case err := <-got:
				t.Fatalf("waiter returned while the lock was held (err %v; holder's context: %v)", err, context.Cause(a.Context()))
			case <-time.After(500 * time.Millisecond):
			}
			if err := a.Release(timeout(t, 5*time.Second)); err != nil {
				t.Fatalf("holder's Release: %v", err)
			}
			if err := <-got; err != nil {
				t.Fatalf("waiter after the release: %v", err)
			}
			if err := b.Release(timeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHolder_EntryDeletedWithinTheWatchGraceEndsTheLease: a lock taken
// without waiting starts its own-key watch only after watchGrace; an entry
// deleted by someone else before then (an operator, here) still ends the
// lease with ErrLockLost once the watch starts, and Release reports the lock
// as not held.
func TestHolder_EntryDeletedWithinTheWatchGraceEndsTheLease(t *testing.T) {
	t.Parallel()
	for _, wait := range []instrument.AcquireOption{instrument.FailFast(), instrument.WaitUntilDeadline()} {
		c := testenv.NewEtcd(t).Client(t)
		l := newLocker(t, c)
		const key = "deleted-in-grace"
		// A long TTL: the watchdog would find a revoked lease on its own, and this
		// test is about a deleted entry.
		h, err := l.Acquire(timeout(t, 5*time.Second), key, wait, instrument.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Delete(timeout(t, 5*time.Second), l.QueuePrefix(key), clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.Context().Done():
			if err := context.Cause(h.Context()); !errors.Is(err, instrument.ErrLockLost) {
				t.Fatalf("lease ended with %v, want ErrLockLost", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the lease outlived its deleted entry by 10 s")
		}
		if err := h.Release(timeout(t, 5*time.Second)); !errors.Is(err, instrument.ErrLockLost) && !errors.Is(err, instrument.ErrNotHeld) {
			t.Fatalf("Release of a deleted entry: %v", err)
		}
	}
}
