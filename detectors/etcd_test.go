package detectors_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
)

// TestEtcd_TheHeadEntryHoldsTheLock: a held etcdlock lock with a queued
// waiter is one lock (the entry with the lowest create revision), with one
// waiter, and no finding.
func TestEtcd_TheHeadEntryHoldsTheLock(t *testing.T) {
	ctx := timeout(t, time.Minute)
	c := newEtcd(t)
	l, err := etcdlock.New(c, etcdlock.WithService("test"))
	if err != nil {
		t.Fatal(err)
	}
	holder := acquire(t, ctx, l, "lock:q", instrument.WithTTL(30*time.Second))
	queueWaiter(t, ctx, c, l, "lock:q")
	s := etcdStore(t, c)
	var locks []detectors.Lock
	if err := s.ScanLocks(ctx, nil, func(l detectors.Lock) error { locks = append(locks, l); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || locks[0].Key != "lock:q" || locks[0].Waiters != 1 || locks[0].Fence != holder.Fence() || !locks[0].TTLKnown {
		t.Fatalf("locks %+v, want lock:q held with fence %d and one waiter", locks, holder.Fence())
	}
	d, err := detectors.NewLocks(s)
	if err != nil {
		t.Fatal(err)
	}
	if fs := detect(t, ctx, d); len(fs) != 0 || d.Scanned() != 1 {
		t.Fatalf("scanned %d, findings:%s", d.Scanned(), describe(fs))
	}
}

// queueWaiter starts an Acquire of key on l that waits behind its holder,
// and returns once its entry is queued; the test's cleanup ends it.
func queueWaiter(t *testing.T, ctx context.Context, c *clientv3.Client, l *etcdlock.Locker, key string) {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := l.Acquire(wctx, key, instrument.WithTTL(30*time.Second))
		waited <- err
	}()
	t.Cleanup(func() { cancel(); <-waited })
	for {
		resp, err := c.Get(ctx, l.QueuePrefix(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 2 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the waiter never queued")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestEtcd_AForeignEntryInsideALocksQueueDoesNotSplitIt: another writer's
// entries named like a queue entry but not one (a longer suffix), each
// sorting right after one of a held lock's two entries, are locks of their
// own, and the lock is still one, held by its head entry, with its waiter.
// Before, each foreign entry ended the lock's group: the waiter's entry was
// reported as a second lock:q, holding it.
func TestEtcd_AForeignEntryInsideALocksQueueDoesNotSplitIt(t *testing.T) {
	ctx := timeout(t, time.Minute)
	c := newEtcd(t)
	l, err := etcdlock.New(c, etcdlock.WithService("test"))
	if err != nil {
		t.Fatal(err)
	}
	holder := acquire(t, ctx, l, "lock:q", instrument.WithTTL(30*time.Second))
	queueWaiter(t, ctx, c, l, "lock:q")
	resp, err := c.Get(ctx, l.QueuePrefix("lock:q"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	foreign := map[string]bool{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key) + "x" // right after kv in key order, before the next entry
		if _, err := c.Put(ctx, k, "another writer's"); err != nil {
			t.Fatal(err)
		}
		foreign[k] = true
	}
	s := etcdStore(t, c)
	var held []detectors.Lock
	others := map[string]bool{}
	if err := s.ScanLocks(ctx, nil, func(l detectors.Lock) error {
		if l.Key == "lock:q" {
			held = append(held, l)
		} else {
			others[l.StoreKey] = l.Holder.Foreign
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].Waiters != 1 || held[0].Fence != holder.Fence() {
		t.Fatalf("lock:q scanned as %+v, want one lock with fence %d and one waiter", held, holder.Fence())
	}
	if len(others) != len(foreign) {
		t.Fatalf("other locks %v, want the %d foreign entries", others, len(foreign))
	}
	for k := range foreign {
		if isForeign, ok := others[k]; !ok || !isForeign {
			t.Errorf("foreign entry %q: listed %v, foreign holder %v", k, ok, isForeign)
		}
	}
}
