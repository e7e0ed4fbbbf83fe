package markerbeforewrite

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

type DB interface {
	SaveOrder(ctx context.Context, orderID string) error
}

// Spec 002, 4.1: the idempotency check whose root cause the spec names -
// "Redis写入成功但DB写入失败时，缓存已标记为已处理，下次请求将跳过实际业务逻辑".
// Adapted to Go with the marker written before the DB write, the order
// that produces exactly that failure.
func processOrder(ctx context.Context, rdb redis.Cmdable, db DB, orderID string) (string, error) {
	n, err := rdb.Exists(ctx, "idempotent:"+orderID).Result()
	if err != nil {
		return "", err
	}
	if n > 0 {
		return "DUPLICATED", nil
	}
	rdb.SetEx(ctx, "idempotent:"+orderID, "processed", time.Hour) // want `idempotency marker "idempotent:" \+ orderID is set before the write it guards \(line 27\); when that write fails, the return at line 28 leaves the marker in place`
	if err := db.SaveOrder(ctx, orderID); err != nil {
		return "", err
	}
	return "SUCCESS", nil
}

// Check-then-set on a key that does not say "idempotent": the GET before
// the SET makes it a marker.
func pay(ctx context.Context, rdb redis.Cmdable, db DB, requestKey, orderID string) error {
	if rdb.Get(ctx, requestKey).Val() != "" {
		return nil
	}
	ok, err := rdb.SetNX(ctx, requestKey, "1", 24*time.Hour).Result() // want `idempotency marker requestKey is set before the write it guards`
	if err != nil || !ok {
		return err
	}
	err = db.SaveOrder(ctx, orderID)
	if err != nil {
		return err
	}
	return nil
}

// Negatives.

// The marker is removed when the write fails.
func releasedOnError(ctx context.Context, rdb redis.Cmdable, db DB, orderID string) error {
	key := "idem:order:" + orderID
	ok, err := rdb.SetNX(ctx, key, "processing", time.Hour).Result()
	if err != nil || !ok {
		return err
	}
	if err := db.SaveOrder(ctx, orderID); err != nil {
		rdb.Del(ctx, key)
		return err
	}
	return rdb.Set(ctx, key, "done", time.Hour).Err()
}

// The marker is set after the write succeeds.
func markAfter(ctx context.Context, rdb redis.Cmdable, db DB, orderID string) error {
	if err := db.SaveOrder(ctx, orderID); err != nil {
		return err
	}
	return rdb.SetEx(ctx, "idempotent:"+orderID, "processed", time.Hour).Err()
}

// A cache write is not a marker.
func cacheThenSave(ctx context.Context, rdb redis.Cmdable, db DB, orderID string) error {
	rdb.Set(ctx, "order-cache:"+orderID, "{}", time.Minute)
	if err := db.SaveOrder(ctx, orderID); err != nil {
		return err
	}
	return nil
}
