package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
)

// LockGetSet is the lock way: a governed Redis lock around a plain GET and
// SET of the stock, the pattern the spec starts from. Each deduction costs
// acquire + GET + SET + release, four round trips, all serialised behind the
// lock, and correctness rests on the lock alone: a holder that lost its lock
// (paused past its TTL) and then SETs would overwrite a newer value. The SET
// is skipped when the lease's context has ended, which narrows that window
// but cannot close it; the quota way closes it by checking in the script
// that writes.
type LockGetSet struct {
	RDB    redis.UniversalClient
	Locker instrument.Locker // a governed redislock
	Item   string

	sold atomic.Int64 // units this process deducted (the way keeps no ledger)
}

func (l *LockGetSet) Name() string { return "lock+get+set" }

func (l *LockGetSet) stockKey() string { return "seckill:stock:" + l.Item }
func (l *LockGetSet) lockKey() string  { return "lock:stock:" + l.Item }

func (l *LockGetSet) Setup(ctx context.Context, stock int64) error {
	l.sold.Store(0)
	return l.RDB.Set(ctx, l.stockKey(), stock, 0).Err()
}

func (l *LockGetSet) Deduct(ctx context.Context, amount int64, _ string) error {
	return instrument.Do(ctx, l.Locker, l.lockKey(), func(ctx context.Context) error {
		stock, err := l.RDB.Get(ctx, l.stockKey()).Int64()
		if err != nil {
			return err
		}
		if stock < amount {
			return ErrSoldOut
		}
		if err := context.Cause(ctx); err != nil {
			return fmt.Errorf("lock lost before the write: %w", err)
		}
		if err := l.RDB.Set(ctx, l.stockKey(), strconv.FormatInt(stock-amount, 10), 0).Err(); err != nil {
			return err
		}
		l.sold.Add(amount)
		return nil
	}, instrument.WaitUntilDeadline())
}

func (l *LockGetSet) Audit(ctx context.Context) (int64, int64, error) {
	left, err := l.RDB.Get(ctx, l.stockKey()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("stock key %s missing", l.stockKey())
	}
	return left, l.sold.Load(), err
}
