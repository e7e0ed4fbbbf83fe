package setnxexpire

import (
	"context"
	"time"

	redisv8 "github.com/go-redis/redis/v8"
	"github.com/redis/go-redis/v9"
)

// The chapter's "never do this" (spec 001): SETNX + EXPIRE as two commands;
// a crash between them leaves a lock that never expires.
func tryLockTwoCommands(ctx context.Context, rdb redis.UniversalClient, orderID, token string) (bool, error) {
	key := "lock:order:" + orderID
	ok, err := rdb.SetNX(ctx, key, token, 0).Result() // want `SETNX then EXPIRE on "lock:order:" \+ orderID \(line 19\) are two commands`
	if err != nil || !ok {
		return false, err
	}
	rdb.Expire(ctx, key, 30*time.Second)
	return true, nil
}

// The same with the raw commands.
func tryLockDo(ctx context.Context, rdb *redis.Client, key, token string) error {
	if err := rdb.Do(ctx, "SETNX", key, token).Err(); err != nil { // want `SETNX then EXPIRE on key`
		return err
	}
	return rdb.Do(ctx, "EXPIRE", key, 30).Err()
}

// A plain SET on a lock key, then PEXPIRE.
func setThenPExpire(ctx context.Context, rdb redis.Cmdable, id string) {
	rdb.Set(ctx, "lock:report:"+id, "me", 0) // want `SET then PEXPIRE on "lock:report:" \+ id`
	rdb.PExpire(ctx, "lock:report:"+id, time.Minute)
}

// SET NX through SetArgs without a TTL.
func setArgsNX(ctx context.Context, rdb redis.Cmdable, key string, ttl time.Duration) {
	rdb.SetArgs(ctx, key, "me", redis.SetArgs{Mode: "NX"}) // want `SET NX then EXPIRE on key`
	rdb.Expire(ctx, key, ttl)
}

// go-redis v8 too.
func v8(ctx context.Context, rdb *redisv8.Client, key string) {
	rdb.SetNX(ctx, key, "me", 0) // want `SETNX then EXPIRE on key`
	rdb.Expire(ctx, key, time.Minute)
}

// Negative: one SET NX PX.
func oneCommand(ctx context.Context, rdb redis.Cmdable, key, token string) (bool, error) {
	return rdb.SetNX(ctx, key, token, 30*time.Second).Result()
}

// Negative: the EXPIRE is on another key.
func otherKey(ctx context.Context, rdb redis.Cmdable, key, token string) {
	rdb.SetNX(ctx, key, token, 0)
	rdb.Expire(ctx, key+":meta", time.Minute)
}

// Negative: MULTI/EXEC sends both or neither.
func transaction(ctx context.Context, rdb redis.Cmdable, key, token string) error {
	_, err := rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.SetNX(ctx, key, token, 0)
		pipe.Expire(ctx, key, time.Minute)
		return nil
	})
	return err
}

// Negative: a cache entry, not a lock, set then expired (a different
// problem, not this analyzer's).
func cache(ctx context.Context, rdb redis.Cmdable, userID string) {
	rdb.Set(ctx, "profile:"+userID, "{}", 0)
	rdb.Expire(ctx, "profile:"+userID, time.Hour)
}

// Negative: the EXPIRE comes first.
func expireFirst(ctx context.Context, rdb redis.Cmdable, key string) {
	rdb.Expire(ctx, key, time.Minute)
	rdb.SetNX(ctx, key, "me", 0)
}
