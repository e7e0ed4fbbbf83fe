package etcdfence_test

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/instrument/fence/etcdfence"
)

func ExampleGuard_Put() {
	var (
		ctx context.Context
		cli *clientv3.Client
	)
	raw, err := etcdlock.New(cli)
	if err != nil {
		panic(err)
	}
	locker := instrument.Govern(raw)
	lease, err := locker.Acquire(ctx, "lock:order:7", instrument.WithTTL(5*time.Second))
	if err != nil {
		return
	}
	defer lease.Release(context.WithoutCancel(ctx))
	g, err := etcdfence.For(ctx, cli, raw, lease) // the Locker that issued the lease
	if err != nil {
		return
	}
	if err := g.Put(ctx, "orders/7/state", "paid"); errors.Is(err, fence.ErrStaleFence) {
		return // the lock is no longer ours
	}
}
