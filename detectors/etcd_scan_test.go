package detectors_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
)

// queueWaiters queues n Acquires of key on l behind its holder, one after
// the other, each returning once its entry is in etcd; cleanup ends them.
func queueWaiters(t *testing.T, ctx context.Context, c *clientv3.Client, l *etcdlock.Locker, key string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
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
			if resp.Count == int64(i+2) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("waiter %d of %s never queued", i+1, key)
			case <-time.After(10 * time.Millisecond): // polling etcd's state, not a synchronisation by time
			}
		}
	}
}

// queuedLock is lock:q on a new etcd, held through an etcdlock Locker
// (a 30 s TTL) with n waiters queued behind its holder; the test's
// cleanup ends the waiters.
func queuedLock(t *testing.T, ctx context.Context, n int) (*clientv3.Client, *etcdlock.Locker, instrument.Lease) {
	t.Helper()
	c := newEtcd(t)
	l, err := etcdlock.New(c, etcdlock.WithService("test"))
	if err != nil {
		t.Fatal(err)
	}
	holder := acquire(t, ctx, l, "lock:q", instrument.WithTTL(30*time.Second))
	queueWaiters(t, ctx, c, l, "lock:q", n)
	return c, l, holder
}

// scanAll is every lock a ScanLocks reports, in order.
func scanAll(t *testing.T, ctx context.Context, s detectors.Store) []detectors.Lock {
	t.Helper()
	var locks []detectors.Lock
	if err := s.ScanLocks(ctx, nil, func(l detectors.Lock) error { locks = append(locks, l); return nil }); err != nil {
		t.Fatal(err)
	}
	return locks
}

// TestEtcd_TheHeadEntryHoldsTheLock: a held etcdlock lock with a queued
// waiter is one lock (the entry with the lowest create revision), with one
// waiter, and no finding.
func TestEtcd_TheHeadEntryHoldsTheLock(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c, _, holder := queuedLock(t, ctx, 1)
	s := etcdStore(t, c)
	locks := scanAll(t, ctx, s)
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

// TestEtcd_AForeignEntryInsideALocksQueueDoesNotSplitIt: another writer's
// entries named like a queue entry but not one (a longer suffix), each
// sorting right after one of a held lock's two entries, are locks of their
// own, and the lock is still one, held by its head entry, with its waiter.
// Before, each foreign entry ended the lock's group: the waiter's entry was
// reported as a second lock:q, holding it.
func TestEtcd_AForeignEntryInsideALocksQueueDoesNotSplitIt(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c, l, holder := queuedLock(t, ctx, 1)
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

// TestEtcd_ForeignEntriesInEveryPositionAndEveryPageSizeLeaveALockWhole:
// a lock with a holder and four waiters, and entries of another writer
// before, between and after its entries in key order: the prefix itself,
// the lock's key without its NUL, its queue prefix alone, each entry with a
// byte appended (a letter, 0xff, and a NUL followed by 16 hex digits, which
// reads as etcdlock's layout for a key holding a NUL, a key etcdlock never
// writes), an upper-case lease ID (etcdlock writes lower case), and names
// after the queue. At every page size from 1 up (so that a page boundary
// falls at every position, a foreign entry's included), the lock is one
// lock, held by its head entry with four waiters, and each foreign entry is
// one lock of its own, named by its whole etcd key, held by a foreign
// holder (detectors' package doc, "etcdctl").
func TestEtcd_ForeignEntriesInEveryPositionAndEveryPageSizeLeaveALockWhole(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	const key = "lock:q"
	c, l, holder := queuedLock(t, ctx, 4)
	resp, err := c.Get(ctx, l.QueuePrefix(key), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	p := etcdlock.DefaultPrefix
	foreign := []string{p, p + "lock:p", p + key, p + key + "\x00", p + key + "\x00\x00", p + key + "\x00g",
		p + key + "\x00\xff\xfe", p + key + "\x01", p + key + "\x00" + "ABCDEF0123456789", p + "lock:r\x00" + "0123456789abcdef" + "\x00" + "0123456789abcdef"}
	for _, kv := range resp.Kvs {
		e := string(kv.Key)
		foreign = append(foreign, e+"x", e+"\xff", e+"\x00"+"0123456789abcdef", e[:len(e)-1])
	}
	// Entries whose lease IDs share 15 digits share e[:len(e)-1]: one
	// foreign entry.
	sort.Strings(foreign)
	foreign = slices.Compact(foreign)
	for _, k := range foreign {
		if _, err := c.Put(ctx, k, "another writer's"); err != nil {
			t.Fatal(err)
		}
	}
	total := len(resp.Kvs) + len(foreign)
	for count := 1; count <= total+1; count++ {
		locks := scanAll(t, ctx, etcdStore(t, c, detectors.WithScanCount(count)))
		var held []detectors.Lock
		others := map[string]int{}
		for _, lk := range locks {
			if lk.Key == key {
				held = append(held, lk)
				continue
			}
			others[lk.Key]++
			if lk.StoreKey != lk.Key || !lk.Holder.Foreign || lk.Waiters != 0 {
				t.Errorf("page size %d: foreign entry %q reported as %+v, want a lock of its own named by its etcd key, foreign", count, lk.Key, lk)
			}
		}
		if len(held) != 1 || held[0].Waiters != 4 || held[0].Fence != holder.Fence() || held[0].Holder.Service != "test" {
			t.Fatalf("page size %d: %s reported as %+v, want one lock with fence %d and 4 waiters", count, key, held, holder.Fence())
		}
		for _, k := range foreign {
			if others[k] != 1 {
				t.Errorf("page size %d: foreign entry %q reported %d times, want once", count, k, others[k])
			}
		}
		if len(others) != len(foreign) {
			t.Errorf("page size %d: %d other locks, want the %d foreign entries: %q", count, len(others), len(foreign), keysOf(others))
		}
		if t.Failed() {
			return
		}
	}
}

func keysOf(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestEtcd_AKeyThatIsNotUTF8WithForeignEntriesInsideIsOneLock: another
// library's queue in etcdlock's layout under a key that is not UTF-8, with
// foreign entries between its entries, is one lock with its waiter.
func TestEtcd_AKeyThatIsNotUTF8WithForeignEntriesInsideIsOneLock(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := newEtcd(t)
	key := "lock:\xff\xfe"
	q := etcdlock.DefaultPrefix + key + "\x00"
	entries := []string{q + "00000000000000b1", q + "00000000000000a1"} // the later key is put first: the holder
	var fence int64
	for i, e := range entries {
		r, err := c.Put(ctx, e, fmt.Sprint("entry ", i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			fence = r.Header.Revision
		}
	}
	for _, f := range []string{q + "00000000000000a1\xff", q + "00000000000000a1\x00" + "00000000000000a2", q + "00000000000000a"} {
		if _, err := c.Put(ctx, f, "another writer's"); err != nil {
			t.Fatal(err)
		}
	}
	for count := 1; count <= 6; count++ {
		var held []detectors.Lock
		for _, lk := range scanAll(t, ctx, etcdStore(t, c, detectors.WithScanCount(count))) {
			if lk.Key == key {
				held = append(held, lk)
			}
		}
		if len(held) != 1 || held[0].Waiters != 1 || held[0].Fence != uint64(fence) || held[0].StoreKey != entries[0] || !held[0].NoTTL {
			t.Fatalf("page size %d: %q reported as %+v, want one lock held by %q (fence %d) with one waiter", count, key, held, entries[0], fence)
		}
	}
}

// TestEtcd_AScanIsOneSnapshotAcrossPages: entries deleted while a scan is
// between two pages (the holder, not yet read, and a waiter) are still the
// lock the scan reports: every page is read at the first page's revision.
// The scan's own callback deletes them, after the page that holds a
// foreign entry sorting inside the lock's queue, before the next page.
func TestEtcd_AScanIsOneSnapshotAcrossPages(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := newEtcd(t)
	q := etcdlock.DefaultPrefix + "lock:s\x00"
	e1, e2, e3 := q+"0000000000000001", q+"0000000000000002", q+"0000000000000003"
	var holderRev int64
	for _, e := range []string{e3, e1, e2} { // e3 first: the holder, read last
		r, err := c.Put(ctx, e, "x")
		if err != nil {
			t.Fatal(err)
		}
		if holderRev == 0 {
			holderRev = r.Header.Revision
		}
	}
	between := e1 + "x"
	if _, err := c.Put(ctx, between, "another writer's"); err != nil {
		t.Fatal(err)
	}
	s := etcdStore(t, c, detectors.WithScanCount(1))
	var got []detectors.Lock
	deleted := false
	err := s.ScanLocks(ctx, nil, func(l detectors.Lock) error {
		got = append(got, l)
		if l.Key == between && !deleted {
			deleted = true
			for _, e := range []string{e3, e2} {
				if _, err := c.Delete(ctx, e); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !deleted {
		t.Fatalf("the scan never reported %q: %+v", between, got)
	}
	var held []detectors.Lock
	for _, l := range got {
		if strings.HasPrefix(l.StoreKey, q) && l.Key == "lock:s" {
			held = append(held, l)
		}
	}
	if len(held) != 1 || held[0].StoreKey != e3 || held[0].Fence != uint64(holderRev) || held[0].Waiters != 2 {
		t.Fatalf("lock:s reported as %+v, want it as at the scan's first page: held by %q (fence %d), two waiters", held, e3, holderRev)
	}
}

// TestEtcd_AnEntryUnderALocksQueueSaysItHoldsUpThatLock: another writer's
// key under a lock's queue prefix ("<key>\x00other") is a holder of that
// lock to etcdlock (instrument/etcdlock, "Failure modes"): every Acquire
// of lock:q waits behind it. Its finding, a lock of its own named by its
// etcd key, says which lock it holds up and that deleting it hands that
// lock on.
func TestEtcd_AnEntryUnderALocksQueueSaysItHoldsUpThatLock(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := newEtcd(t)
	other := etcdlock.DefaultPrefix + "lock:q\x00other"
	if _, err := c.Put(ctx, other, "another writer's"); err != nil {
		t.Fatal(err)
	}
	d, err := detectors.NewLocks(etcdStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := byKey(detect(t, ctx, d), detectors.KindImmortal)[other]
	if !ok {
		t.Fatalf("no immortal finding on %q", other)
	}
	if !strings.Contains(f.Detail, "etcdlock counts it as a holder of lock:q") {
		t.Errorf("detail %q: want it to say it holds up lock:q", f.Detail)
	}
}
