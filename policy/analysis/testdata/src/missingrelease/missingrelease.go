package missingrelease

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/lockgov/lockgov/instrument"
	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/client/v3/concurrency"
)

var errBusy = errors.New("busy")

func neverReleased(ctx context.Context, l instrument.Locker, key string) error {
	lease, err := l.Acquire(ctx, key) // want `lockgov Acquire: lease is never released in this function and not handed on`
	if err != nil {
		return err
	}
	log.Printf("holding %s", lease.Key())
	return work(ctx)
}

func discarded(ctx context.Context, l instrument.Locker, key string) error {
	_, err := l.Acquire(ctx, key) // want `the lock lockgov Acquire returns is discarded`
	return err
}

func earlyReturn(ctx context.Context, l instrument.Locker, key string, skip bool) error {
	lease, err := l.Acquire(ctx, key) // want `lockgov Acquire: lease is still held at the return at line 38`
	if err != nil {
		return err
	}
	if skip {
		return nil
	}
	defer lease.Release(ctx)
	return work(ctx)
}

func notDeferred(ctx context.Context, s *concurrency.Session) error {
	m := concurrency.NewMutex(s, "/locks/order/1")
	if err := m.Lock(ctx); err != nil { // want `etcd Mutex.Lock: m is released, but not by defer`
		return err
	}
	work(ctx)
	return m.Unlock(ctx)
}

func redsyncLeak(ctx context.Context, rs *redsync.Redsync) error {
	m := rs.NewMutex("lock:order:2")
	if err := m.LockContext(ctx); err != nil { // want `redsync Mutex.LockContext: m is still held at the return at line 59`
		return err
	}
	if err := work(ctx); err != nil {
		return err
	}
	_, err := m.UnlockContext(ctx)
	return err
}

func bsmNever(ctx context.Context, c *redislock.Client, orderID string) error {
	lock, err := c.Obtain(ctx, "lock:order:"+orderID, 10*time.Second, nil) // want `redislock Obtain: lock is never released`
	if errors.Is(err, redislock.ErrNotObtained) {
		return errBusy
	} else if err != nil {
		return err
	}
	log.Printf("holding %s", lock.Key())
	return work(ctx)
}

func etcdNeverInit(ctx context.Context, s *concurrency.Session) error {
	m := concurrency.NewMutex(s, "/locks/order/3")
	if err := m.Lock(ctx); err != nil { // want `etcd Mutex.Lock: m is never released`
		return err
	}
	return work(ctx)
}

func redisEarlyReturn(ctx context.Context, rdb redis.Cmdable, orderID, token string) error {
	key := "lock:order:" + orderID
	ok, err := rdb.SetNX(ctx, key, token, 10*time.Second).Result() // want `Redis SETNX: the lock on "lock:order:" \+ orderID is still held at the return at line 91`
	if err != nil || !ok {
		return errBusy
	}
	if err := work(ctx); err != nil {
		return err
	}
	return rdb.Eval(ctx, "release", []string{key}, token).Err()
}

// Negatives.

func deferred(ctx context.Context, l instrument.Locker, key string) error {
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	defer lease.Release(ctx)
	return work(ctx)
}

func deferredLiteral(ctx context.Context, l instrument.Locker, key string) (err error) {
	lease, err := l.Acquire(ctx, key)
	switch {
	case err != nil:
		return err
	}
	defer func() {
		if rerr := lease.Release(context.WithoutCancel(ctx)); err == nil {
			err = rerr
		}
	}()
	return work(ctx)
}

func etcdDeferred(ctx context.Context, s *concurrency.Session) error {
	m := concurrency.NewMutex(s, "/locks/order/4")
	if err := m.Lock(ctx); err != nil {
		return err
	}
	defer m.Unlock(ctx)
	return work(ctx)
}

func onlyOnSuccess(ctx context.Context, l instrument.Locker, key string) error {
	lease, err := l.Acquire(ctx, key)
	if err == nil {
		defer lease.Release(ctx)
		return work(ctx)
	}
	return err
}

func fatal(ctx context.Context, l instrument.Locker, key string) {
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	if err := work(ctx); err != nil {
		log.Fatal(err) // the process ends: the TTL frees the lock
	}
}

// Handed on: the caller releases.
func handedOn(ctx context.Context, l instrument.Locker, key string) (instrument.Lease, error) {
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

func toGoroutine(ctx context.Context, l instrument.Locker, key string) error {
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	go func() {
		defer lease.Release(context.Background())
		work(ctx)
	}()
	return nil
}

// A mutex kept in a struct: Lock and Unlock are different methods.
type service struct{ m *redsync.Mutex }

func (s *service) Begin(ctx context.Context) error { return s.m.LockContext(ctx) }
func (s *service) End(ctx context.Context) error {
	_, err := s.m.UnlockContext(ctx)
	return err
}

// A TryLock wrapper: the caller releases.
func tryLock(ctx context.Context, rdb redis.Cmdable, key, token string) (bool, error) {
	return rdb.SetNX(ctx, key, token, 10*time.Second).Result()
}

// instrument.Do releases by itself.
func scoped(ctx context.Context, l instrument.Locker, key string) error {
	return instrument.Do(ctx, l, key, func(ctx context.Context) error { return work(ctx) })
}

func work(context.Context) error { return nil }

// A lock service hands the lock to its client by key (etcd's v3lock).
func lockRPC(ctx context.Context, s *concurrency.Session, name string) (string, error) {
	m := concurrency.NewMutex(s, name)
	if err := m.Lock(ctx); err != nil {
		return "", err
	}
	return m.Key(), nil
}
