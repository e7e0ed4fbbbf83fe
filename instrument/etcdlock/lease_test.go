package etcdlock_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// A lease dropped without Release is released when it is collected
// (reported as leaked), so the key is free again: nothing the lease core's
// timers or the own-key watch reference keeps the handle alive.
func TestAcquire_DroppedLeaseIsReleasedWhenCollected(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	l, other := newLocker(t, c), newLocker(t, c)
	var leaked atomic.Int32
	func() {
		cfg, err := instrument.ApplyAcquireOptions()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Observer = instrument.ObserverFuncs{OnLeaked: func() { leaked.Add(1) }}
		if _, err := l.Acquire(timeout(t, 5*time.Second), "dropped", instrument.WithConfig(cfg)); err != nil {
			t.Fatal(err)
		}
	}()
	waitCollectedAndFree(t, other, "dropped")
	if n := leaked.Load(); n != 1 {
		t.Fatalf("%d Leaked events, want 1", n)
	}
}

// WithoutWatchdog stops renewing only once the lock is held: a waiter's
// lease is kept alive for a wait longer than its TTL, and the lease then
// ends by itself.
func TestWithoutWatchdog_WaiterOutlivesItsTTLAndTheHeldLeaseExpires(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	lh, lw := newLocker(t, admin), newLocker(t, e.Client(t))
	const key = "no-watchdog-waiter"
	h, err := lh.Acquire(timeout(t, 5*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	// A TTL of 3 s, not 1 s: the waiter's lease must be renewed, and seen
	// renewed, within its TTL all through the wait, and with 1 s a loaded
	// machine (-parallel 8) once let it expire locally ("expired without a
	// confirmed renewal") while the waiter waited.
	got := acquireInBackground(t, lw, key, 60*time.Second, instrument.WithTTL(3*time.Second), instrument.WithoutWatchdog())
	waiter := newestEntry(t, admin, lw, key, 2)
	ttl, err := admin.TimeToLive(timeout(t, 5*time.Second), clientv3.LeaseID(waiter.Lease))
	if err != nil {
		t.Fatal(err)
	}
	// The property is about time itself: the wait must outlast the TTL
	// etcd granted the waiter's lease.
	outlast := time.Now().Add(time.Duration(ttl.GrantedTTL)*time.Second + 500*time.Millisecond)
	for time.Now().Before(outlast) {
		select {
		case r := <-got:
			t.Fatalf("waiter returned while the lock was held: %v", r.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := h.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	var r acquired
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("waiter still waiting 20s after the holder released")
	}
	if r.err != nil {
		t.Fatalf("waiter whose wait outlasted its TTL: %v", r.err)
	}
	select {
	case <-r.lease.Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a held lease WithoutWatchdog still live 20s after it was taken: it is being renewed")
	}
	if cause := context.Cause(r.lease.Context()); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("cause: %v, want ErrLockLost", cause)
	}
}

// waitCollectedAndFree runs the garbage collector until l can take key,
// which a dropped lease holds until its cleanup has released it.
func waitCollectedAndFree(t *testing.T, l instrument.Locker, key string) {
	t.Helper()
	ctx := timeout(t, 20*time.Second)
	for {
		runtime.GC()
		h, err := l.Acquire(ctx, key, instrument.FailFast())
		if err == nil {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			return
		}
		if !errors.Is(err, instrument.ErrNotAcquired) || ctx.Err() != nil {
			t.Fatalf("dropped lease never released: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
