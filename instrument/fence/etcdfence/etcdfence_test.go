package etcdfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/instrument/fence/etcdfence"
	"github.com/lockgov/lockgov/internal/testenv"
)

func timeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func wantStale(t *testing.T, err error, stored, offered uint64) {
	t.Helper()
	var se *fence.StaleFenceError
	if !errors.Is(err, fence.ErrStaleFence) || !errors.As(err, &se) {
		t.Fatalf("err = %v, want ErrStaleFence", err)
	}
	if se.Stored != stored || se.Offered != offered || se.Store != "etcd" {
		t.Fatalf("StaleFenceError %+v, want stored %d offered %d", se, stored, offered)
	}
}

// TestGuard_WritesWhileHeldAndRefusesAfterTakeover: the holder writes as
// often as it likes; once its entry is gone (deleted as a lost lease would
// be) and a waiter took over, its writes are refused with the new holder's
// fence, and the new holder's go through.
func TestGuard_WritesWhileHeldAndRefusesAfterTakeover(t *testing.T) {
	e := testenv.NewEtcd(t)
	cli := e.Client(t)
	l, err := etcdlock.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, 30*time.Second)
	const key = "lock:order:7"
	old, err := l.Acquire(ctx, key, instrument.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Release(ctx) }()
	g, err := etcdfence.For(ctx, cli, l, old)
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence() != old.Fence() {
		t.Fatalf("guard fence %d, lease fence %d", g.Fence(), old.Fence())
	}
	for _, v := range []string{"created", "paid"} {
		if err := g.Put(ctx, "orders/7", v); err != nil {
			t.Fatalf("put %s while held: %v", v, err)
		}
	}
	// Take the lock away from old as an expired session lease would.
	if _, err := cli.Delete(ctx, l.QueuePrefix(key), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	<-old.Context().Done()
	next, err := l.Acquire(ctx, key, instrument.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = next.Release(ctx) }()
	wantStale(t, g.Put(ctx, "orders/7", "refunded"), next.Fence(), old.Fence())
	ng, err := etcdfence.For(ctx, cli, l, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := ng.Put(ctx, "orders/7", "shipped"); err != nil {
		t.Fatal(err)
	}
	if r, err := cli.Get(ctx, "orders/7"); err != nil || string(r.Kvs[0].Value) != "shipped" {
		t.Fatalf("orders/7 = %v %v, want shipped", r, err)
	}
	// A guard for a lease whose entry is already gone is refused at once.
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = etcdfence.For(ctx, cli, l, next)
	wantStale(t, err, 0, next.Fence())
	wantStale(t, ng.Put(ctx, "orders/7", "late"), 0, next.Fence())
}

func TestGuard_CmpComposesWithOwnTransactions(t *testing.T) {
	e := testenv.NewEtcd(t)
	cli := e.Client(t)
	l, err := etcdlock.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, 30*time.Second)
	lease, err := l.Acquire(ctx, "lock:a", instrument.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()
	g, err := etcdfence.For(ctx, cli, l, lease)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Txn(ctx).If(g.Cmp(), clientv3.Compare(clientv3.Version("x"), "=", 0)).
		Then(clientv3.OpPut("x", "1"), clientv3.OpPut("y", "2")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("own txn = %v %v", resp, err)
	}
	if err := g.Txn(ctx); err == nil {
		t.Fatal("empty Txn accepted")
	}
	if _, err := etcdfence.For(ctx, nil, l, lease); err == nil {
		t.Fatal("nil client accepted")
	}
}
