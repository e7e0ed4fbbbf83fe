package globallockkey

import (
	"context"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/lockgov/lockgov/instrument"
	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Spec 001's counter-example: 全局大锁（lock:order）会让所有订单串行.
func payOrder(ctx context.Context, rdb redis.Cmdable, orderID, token string) (bool, error) {
	return rdb.SetNX(ctx, "lock:order", token, 30*time.Second).Result() // want `Redis SETNX takes the constant lock key "lock:order" while this function works on one orderID: every call serialises on the same lock; put the id in the key \(lock:order:\{order_id\}\)`
}

// Spec 000: 锁的 key 按商户维度，lock:quota:{merchant_id}，不用全局锁.
func deduct(ctx context.Context, l instrument.Locker, merchantID string, amount int64) error {
	return instrument.Do(ctx, l, "lock:quota", func(ctx context.Context) error { return nil }) // want `instrument.Do takes the constant lock key "lock:quota" while this function works on one merchantID`
}

func etcdGlobal(ctx context.Context, s *concurrency.Session, userID int64) error {
	m := concurrency.NewMutex(s, "/locks/user/") // want `etcd concurrency.NewMutex takes the constant lock key "/locks/user/" while this function works on one userID: .*\(/locks/user/\{user_id\}\)`
	if err := m.Lock(ctx); err != nil {
		return err
	}
	return m.Unlock(ctx)
}

const orderLock = "lock:order"

func redsyncGlobal(rs *redsync.Redsync, order_id string) *redsync.Mutex {
	return rs.NewMutex(orderLock) // want `redsync NewMutex takes the constant lock key "lock:order" while this function works on one order_id`
}

// Negatives.

// The spec's fine-grained key.
func payOrderFine(ctx context.Context, rdb redis.Cmdable, orderID, token string) (bool, error) {
	return rdb.SetNX(ctx, "lock:order:"+orderID, token, 30*time.Second).Result()
}

// A constant key with an id in it: one order's lock.
func fixedOrder(ctx context.Context, rdb redis.Cmdable, orderID string) {
	rdb.SetNX(ctx, "lock:order:1001", "me", 30*time.Second)
}

// A singleton job: no entity in sight.
func dailyReport(ctx context.Context, l instrument.Locker) error {
	return instrument.Do(ctx, l, "lock:report:daily", func(ctx context.Context) error { return nil })
}

// Not a lock.
func counter(ctx context.Context, rdb redis.Cmdable, orderID string) {
	rdb.SetNX(ctx, "stats:orders", 0, 0)
}
