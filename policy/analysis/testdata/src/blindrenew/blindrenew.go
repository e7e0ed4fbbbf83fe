package blindrenew

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Spec 000's lock, as the post shows it: TryLock starts a watchdog that
// renews with a bare EXPIRE every TTL/3.
const unlockScript = `
if redis.call("get", KEYS[1]) == ARGV[1] then
 return redis.call("del", KEYS[1])
else
 return 0
end`

type RedisLock struct {
	client redis.Cmdable
	key    string
	token  string
	ttl    time.Duration
}

func (l *RedisLock) TryLock(ctx context.Context) (bool, error) {
	ok, err := l.client.SetNX(ctx, l.key, l.token, l.ttl).Result()
	if err != nil || !ok {
		return false, err
	}
	go l.watchdog(ctx)
	return true, nil
}

func (l *RedisLock) Unlock(ctx context.Context) error {
	return l.client.Eval(ctx, unlockScript, []string{l.key}, l.token).Err()
}

func (l *RedisLock) watchdog(parent context.Context) {
	ticker := time.NewTicker(l.ttl / 3)
	defer ticker.Stop()
	for {
		select {
		case <-parent.Done():
			return
		case <-ticker.C:
			ok, _ := l.client.Expire(parent, l.key, l.ttl).Result() // want `EXPIRE on lock key l.key in a loop renews the lock without checking`
			if !ok {
				return
			}
		}
	}
}

// A renewal goroutine.
func renewInGoroutine(ctx context.Context, rdb redis.Cmdable, orderID string) {
	go func() {
		rdb.PExpire(ctx, "lock:order:"+orderID, 30*time.Second) // want `PEXPIRE on lock key "lock:order:" \+ orderID in a goroutine`
	}()
}

// A timer callback.
func renewLater(rdb redis.Cmdable, lockKey string) *time.Timer {
	return time.AfterFunc(10*time.Second, func() {
		rdb.Expire(context.Background(), lockKey, 30*time.Second) // want `EXPIRE on lock key lockKey in a time.AfterFunc callback`
	})
}

// A renew function started with go.
func (l *RedisLock) extend(ctx context.Context) error {
	return l.client.Expire(ctx, l.key, l.ttl).Err() // want `EXPIRE on lock key l.key in a goroutine \(go extend, line 75\)`
}

func (l *RedisLock) keepAlive(ctx context.Context) {
	go l.extend(ctx)
}

// A renew function called from a loop.
func renewOnce(ctx context.Context, rdb redis.Cmdable, mutexKey string) {
	rdb.Expire(ctx, mutexKey, time.Minute) // want `EXPIRE on lock key mutexKey in a loop \(renewOnce is called in one at line 85\)`
}

func renewForever(ctx context.Context, rdb redis.Cmdable, mutexKey string) {
	for range time.Tick(time.Second) {
		renewOnce(ctx, rdb, mutexKey)
	}
}

// Negative: an owner-checked renewal script in the loop.
const renewScript = `
if redis.call("get", KEYS[1]) == ARGV[1] then
 return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0`

func (l *RedisLock) safeWatchdog(ctx context.Context) {
	for range time.Tick(l.ttl / 3) {
		if n, _ := l.client.Eval(ctx, renewScript, []string{l.key}, l.token, l.ttl.Milliseconds()).Int(); n == 0 {
			return
		}
	}
}

// Negative: a one-off EXPIRE, not a renewal.
func shorten(ctx context.Context, rdb redis.Cmdable, lockKey string) {
	rdb.Expire(ctx, lockKey, time.Second)
}

// Negative: session keys renewed in a loop are not locks.
func touchSessions(ctx context.Context, rdb redis.Cmdable, ids []string) {
	for _, id := range ids {
		rdb.Expire(ctx, "session:"+id, time.Hour)
	}
}
