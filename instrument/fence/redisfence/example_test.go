package redisfence_test

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/instrument/fence/redisfence"
)

func ExampleWriter_Set() {
	var (
		ctx    context.Context
		rdb    *redis.Client
		locker instrument.Locker
	)
	w, err := redisfence.New(rdb)
	if err != nil {
		panic(err)
	}
	lease, err := locker.Acquire(ctx, "lock:stock:{sku-1}", instrument.WithTTL(5*time.Second))
	if err != nil {
		return
	}
	defer lease.Release(context.WithoutCancel(ctx))
	// The value and its fence ("stock:{sku-1}:fenced") share a hash slot.
	if err := w.Set(ctx, "stock:{sku-1}", "41", lease.Fence(), 0); errors.Is(err, fence.ErrStaleFence) {
		return // a newer holder has written: this one lost its lock
	}
}
