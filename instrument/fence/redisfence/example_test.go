package redisfence_test

import (
	"context"
	"errors"
	"fmt"
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

// A Writer whose Set returns nil only once one replica has the value and
// its fence, so that a failover to that replica refuses a stale holder.
// One that too few replicas acknowledged is on the primary: retry it with
// the same fence and value. (Not run: it needs a Sentinel deployment.)
func ExampleWithReplicaAcks() {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "stock",
		SentinelAddrs: []string{"sentinel-0:26379", "sentinel-1:26379", "sentinel-2:26379"},
		ReadTimeout:   3 * time.Second, // at least the ack timeout + 250ms
	})
	defer rdb.Close()
	w, err := redisfence.New(rdb, redisfence.WithReplicaAcks(1, time.Second))
	if err != nil {
		panic(err)
	}
	var lease instrument.Lease // held on lock:stock:{sku-1}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = w.Set(ctx, "stock:{sku-1}", "41", lease.Fence(), 0)
	var nr *redisfence.NotReplicatedError
	switch {
	case errors.As(err, &nr):
		fmt.Printf("on %d of %d replicas: retry with the same fence and value\n", nr.Acked, nr.Wanted)
	case errors.Is(err, fence.ErrStaleFence):
		fmt.Println("a newer holder has written: this one lost its lock")
	case err != nil:
		fmt.Println("store error:", err)
	default:
		fmt.Println("written, on a replica too")
	}
}
