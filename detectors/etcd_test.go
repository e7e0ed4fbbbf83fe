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
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := l.Acquire(wctx, "lock:q", instrument.WithTTL(30*time.Second))
		waited <- err
	}()
	defer func() { cancel(); <-waited }()
	for { // until the waiter's entry is queued
		resp, err := c.Get(ctx, etcdlock.DefaultPrefix+"lock:q\x00", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the waiter never queued")
		case <-time.After(10 * time.Millisecond):
		}
	}
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
