package nodeadline

import (
	"context"
	"log"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/lockgov/lockgov/instrument"
	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Spec 001's "block until timeout" loop, placed in main as the chapter
// says: the loop has its own deadline, but ctx has none, so one SETNX can
// hang on a store that stopped answering.
func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	token := "uuid-7f3a"
	deadline := time.Now().Add(3 * time.Second)
	locked := false
	for !locked && time.Now().Before(deadline) {
		ok, err := rdb.SetNX(ctx, "lock:order:1001", token, 30*time.Second).Result() // want `Redis SETNX with a context that has no deadline \(context.Background\(\)\)`
		if err == nil && ok {
			locked = true
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !locked {
		log.Println("获取锁超时，快速失败")
	}
}

func etcdMutex(s *concurrency.Session) error {
	m := concurrency.NewMutex(s, "/locks/order/42")
	if err := m.Lock(context.TODO()); err != nil { // want `etcd Mutex.Lock with a context that has no deadline \(context.TODO\(\)\)`
		return err
	}
	return m.Unlock(context.TODO())
}

func redsyncLock(rs *redsync.Redsync) error {
	m := rs.NewMutex("lock:report:daily")
	if err := m.Lock(); err != nil { // want `redsync Mutex.Lock takes no context`
		return err
	}
	_, err := m.Unlock()
	return err
}

func redsyncCancelOnly(rs *redsync.Redsync) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := rs.NewMutex("lock:report:weekly")
	if err := m.LockContext(ctx); err != nil { // want `redsync Mutex.LockContext with a context that has no deadline \(context.Background\(\)\)`
		return err
	}
	_, err := m.UnlockContext(ctx)
	return err
}

func bsmWithoutCancel(ctx context.Context, c *redislock.Client, key string) error {
	bg := context.WithoutCancel(ctx)
	lock, err := c.Obtain(bg, key, time.Minute, nil) // want `redislock Obtain with a context that has no deadline \(context.WithoutCancel, which drops the deadline\)`
	if err != nil {
		return err
	}
	return lock.Release(bg)
}

func lockgovAcquire(l instrument.Locker, key string) error {
	lease, err := l.Acquire(context.Background(), key) // want `lockgov Acquire with a context that has no deadline .* \(a governed Locker refuses it in enforce mode\)`
	if err != nil {
		return err
	}
	defer lease.Release(context.Background())
	return nil
}

func lockgovDo(l instrument.Locker, key string) error {
	return instrument.Do(context.Background(), l, key, func(ctx context.Context) error { return nil }) // want `instrument.Do with a context that has no deadline`
}

// Negative: a deadline.
func withTimeout(l instrument.Locker, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vctx := context.WithValue(ctx, struct{}{}, "x")
	return instrument.Do(vctx, l, key, func(ctx context.Context) error { return nil })
}

// Negative: the caller's context is trusted.
func fromCaller(ctx context.Context, s *concurrency.Session) error {
	m := concurrency.NewMutex(s, "/locks/order/43")
	if err := m.Lock(ctx); err != nil {
		return err
	}
	return m.Unlock(ctx)
}

// Negative: a closure using a deadline context made outside it.
func closure(l instrument.Locker, keys []string) {
	ctx := context.Background()
	for _, k := range keys {
		func() {
			octx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_ = instrument.Do(octx, l, k, func(context.Context) error { return nil })
		}()
	}
}

// Negative: SETNX of a key that is not a lock (a dedup marker has its own
// analyzer).
func notALock(rdb redis.Cmdable, id string) {
	rdb.SetNX(context.Background(), "seen:"+id, 1, time.Hour)
}

// Negative: redsync TryLock is one attempt.
func tryOnce(rs *redsync.Redsync) error {
	m := rs.NewMutex("lock:job:1")
	if err := m.TryLock(); err != nil {
		return err
	}
	_, err := m.Unlock()
	return err
}
