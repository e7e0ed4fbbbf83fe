package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// gatedWatcher holds back every response of every watch whose key pass
// refuses until open is closed: a watch that is slow to deliver, as a paused
// process or a busy client sees it. That includes the created notification:
// a lease's own-key watch reads its key when it sees that notification, so
// one created after the test deleted the key (a loaded machine starts the
// watch late) would otherwise find the deletion through that read, not
// through the watches the test is about.
type gatedWatcher struct {
	clientv3.Watcher
	pass func(key string) bool
	open chan struct{}
}

func (w *gatedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := w.Watcher.Watch(ctx, key, opts...)
	if w.pass(key) {
		return in
	}
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			select {
			case <-w.open:
			case <-ctx.Done():
				continue
			}
			select {
			case out <- wr:
			case <-ctx.Done():
			}
		}
	}()
	return out
}

// A waiter whose own entry is deleted while it waits (its lease revoked, or
// expired while the process was paused) must not take the lock when its
// predecessor's deletion arrives before it has seen its own: another waiter
// behind it would take the lock too. Watching the whole queue, the waiter
// sees its own deletion first in the same stream; watching its predecessor,
// it re-checks its own entry. Either way it must report the loss itself, not
// wait for its own-key watch (held back here) or its watchdog (30 s TTL).
func TestWaiter_WhoseEntryWasDeletedWhileWaitingDoesNotGetTheLock(t *testing.T) {
	t.Parallel()
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := testenv.NewEtcd(t)
			admin := e.Client(t)
			lh := newLocker(t, admin)
			const key = "deleted-waiter"
			h, err := lh.Acquire(timeout(t, 5*time.Second), key)
			if err != nil {
				t.Fatal(err)
			}
			head, err := admin.Get(timeout(t, 5*time.Second), lh.QueuePrefix(key), clientv3.WithFirstCreate()...)
			if err != nil || len(head.Kvs) != 1 {
				t.Fatalf("read the holder's entry: %v %v", err, head)
			}
			// The waiter's client delivers only the events of its watch on
			// the holder's entry or on the whole queue; those on its own
			// entry wait.
			gate := &gatedWatcher{pass: func(k string) bool { return k == string(head.Kvs[0].Key) || k == lh.QueuePrefix(key) }, open: make(chan struct{})}
			defer close(gate.open)
			wc := e.Client(t)
			gate.Watcher = wc.Watcher
			wc.Watcher = gate
			lw := inWaitMode(newLocker(t, wc), mode.max)

			// A long TTL and poll interval: the watchdog and the poll would
			// find the deletion on their own, and this test is about the watch.
			got := acquireInBackground(t, lw, key, 30*time.Second, watchOnly...)
			waiter := newestEntry(t, admin, lw, key, 2)
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
					t.Fatal("a waiter whose entry was deleted while it waited got the lock")
				}
				if !errors.Is(r.err, instrument.ErrLockLost) || !strings.Contains(r.err.Error(), "queue entry deleted while waiting") {
					t.Fatalf("waiter: %v, want ErrLockLost from the wait itself", r.err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("waiter still waiting 20s after the holder released")
			}
			want := int64(1) // the one wait watched the whole queue, or not
			if mode.max == 0 {
				want = 0
			}
			if n := etcdlock.QueueWatches(lw); n != want {
				t.Fatalf("%d waits watched the whole queue, want %d", n, want)
			}
		})
	}
}

// A waiter behind one that gives up must not take the lock while the holder
// still holds it: the deletion it sees is not the holder's. Once the holder
// releases, it must take the lock without waiting for the poll.
func TestWaiter_PredecessorGivingUpIsNotAHandoff(t *testing.T) {
	t.Parallel()
	for _, mode := range waitModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			c := testenv.NewEtcd(t).Client(t)
			l := inWaitMode(newLocker(t, c), mode.max)
			const key = "gives-up"
			h, err := l.Acquire(timeout(t, 5*time.Second), key)
			if err != nil {
				t.Fatal(err)
			}
			quitter, quit := context.WithCancel(context.Background())
			defer quit()
			gaveUp := make(chan error, 1)
			go func() {
				_, err := l.Acquire(quitter, key)
				gaveUp <- err
			}()
			for queueLen(t, c, l, key) != 2 {
				time.Sleep(2 * time.Millisecond)
			}
			got := make(chan error, 1)
			var w instrument.Lease
			go func() {
				var err error
				w, err = l.Acquire(timeout(t, 30*time.Second), key, instrument.WithPollInterval(time.Hour))
				got <- err
			}()
			for queueLen(t, c, l, key) != 3 {
				time.Sleep(2 * time.Millisecond)
			}
			quit()
			if err := <-gaveUp; !errors.Is(err, instrument.ErrNotAcquired) {
				t.Fatalf("the waiter that gave up: %v, want ErrNotAcquired", err)
			}
			for queueLen(t, c, l, key) != 2 {
				time.Sleep(2 * time.Millisecond)
			}
			select {
			case err := <-got:
				t.Fatalf("the waiter behind took over while the lock was held (err %v)", err)
			case <-time.After(300 * time.Millisecond):
			}
			if err := h.Release(timeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("the waiter after the release: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the waiter still waits 20 s after the release (poll interval 1 h)")
			}
			if w.Fence() <= h.Fence() {
				t.Fatalf("fence %d not above the released holder's %d", w.Fence(), h.Fence())
			}
			if err := w.Release(timeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
