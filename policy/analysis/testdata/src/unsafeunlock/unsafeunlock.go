package unsafeunlock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisLock is spec 000's lock before the incident "A 删了 B 的锁": Unlock
// was GET, compare, DEL. A ran past its TTL, B took the lock, A's DEL
// deleted B's lock.
type RedisLock struct {
	client redis.Cmdable
	key    string
	token  string
	ttl    time.Duration
}

func (l *RedisLock) TryLock(ctx context.Context) (bool, error) {
	return l.client.SetNX(ctx, l.key, l.token, l.ttl).Result()
}

func (l *RedisLock) Unlock(ctx context.Context) error {
	val, err := l.client.Get(ctx, l.key).Result()
	if err != nil {
		return err
	}
	if val != l.token {
		return errors.New("not the owner")
	}
	return l.client.Del(ctx, l.key).Err() // want `GET \(line 26\) then DEL on lock key l.key: between the two commands the lock can expire`
}

// The spec's fixed Unlock: one compare-and-delete script. Negative.
const unlockScript = `
if redis.call("get", KEYS[1]) == ARGV[1] then
 return redis.call("del", KEYS[1])
else
 return 0
end`

func (l *RedisLock) SafeUnlock(ctx context.Context) error {
	return l.client.Eval(ctx, unlockScript, []string{l.key}, l.token).Err()
}

// A plain DEL: deletes the lock whoever holds it. The token is what TryLock
// stored, so the fix can use it.
func (l *RedisLock) ForceUnlock(ctx context.Context) {
	l.client.Del(ctx, l.key) // want `DEL on lock key l.key deletes the lock whoever holds it`
}

// Within one function: the token is the SET NX value.
func withLock(ctx context.Context, rdb *redis.Client, orderID, token string, fn func() error) error {
	key := "lock:order:" + orderID
	ok, err := rdb.SetNX(ctx, key, token, 10*time.Second).Result()
	if err != nil || !ok {
		return err
	}
	defer rdb.Del(ctx, key) // want `DEL on lock key "lock:order:" \+ orderID deletes the lock whoever holds it`
	return fn()
}

// GET compared inline, UNLINK instead of DEL.
func unlinkInline(ctx context.Context, rdb redis.UniversalClient, lockKey, me string) {
	if rdb.Get(ctx, lockKey).Val() == me {
		rdb.Unlink(ctx, lockKey) // want `GET \(line 67\) then UNLINK on lock key lockKey`
	}
}

// GETDEL is one command, but it still deletes whoever holds the lock.
func getDel(ctx context.Context, rdb redis.Cmdable, id string) string {
	return rdb.GetDel(ctx, "mutex:"+id).Val() // want `GETDEL on lock key "mutex:" \+ id deletes the lock`
}

// No token known: a finding without a fix.
func adminClear(ctx context.Context, rdb redis.Cmdable, name string) error {
	_, err := rdb.Del(ctx, "lock:"+name).Result() // want `DEL on lock key "lock:" \+ name`
	return err
}

// Negative: a WATCH transaction is owner-checked.
func watched(ctx context.Context, rdb *redis.Client, key, token string) error {
	return rdb.Watch(ctx, func(tx *redis.Tx) error {
		if tx.Get(ctx, key).Val() != token {
			return errors.New("not the owner")
		}
		_, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Del(ctx, key)
			return nil
		})
		return err
	}, key)
}

// Negative: not a lock key.
func cacheEvict(ctx context.Context, rdb redis.Cmdable, userID string) {
	rdb.Del(ctx, "profile:"+userID)
}

// Negative: the lock released through a go-redis Script.
var release = redis.NewScript(unlockScript)

func scripted(ctx context.Context, rdb redis.Scripter, key, token string) error {
	return release.Run(ctx, rdb, []string{key}, token).Err()
}
