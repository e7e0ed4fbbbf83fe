// Spec 000, "Redis 分布式锁在高并发扣减场景的正确姿势" and "基于 Snowflake 的分布式
// ID 生成与高并发数据一致性".
package specs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// 加锁、续期、释放: SET NX PX and a Lua compare-and-delete are right; the
// watchdog renews with a bare EXPIRE.
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
			ok, _ := l.client.Expire(parent, l.key, l.ttl).Result() // incident: blindrenew
			if !ok {
				return
			}
		}
	}
}

// 扣减要原子: correct, nothing to report.
const deductScript = `
local remain = tonumber(redis.call("HGET", KEYS[1], "remain"))
local need = tonumber(ARGV[1])
if remain == nil or remain < need then
 return -1
end
redis.call("HINCRBY", KEYS[1], "remain", -need)
return remain - need`

var ErrQuotaNotEnough = errors.New("quota not enough")

func DeductQuota(ctx context.Context, rdb redis.Cmdable, merchantID string, amount int64) (int64, error) {
	key := "quota:" + merchantID
	res, err := rdb.Eval(ctx, deductScript, []string{key}, amount).Result()
	if err != nil {
		return 0, err
	}
	code, _ := res.(int64)
	if code < 0 {
		return 0, ErrQuotaNotEnough
	}
	return code, nil
}

// 一次事故：A 删了 B 的锁. "早期释放锁用的是 GET 再 DEL 两步" - the unlock before
// the incident, as the post describes it.
func (l *RedisLock) UnlockBeforeTheIncident(ctx context.Context) error {
	v, err := l.client.Get(ctx, l.key).Result()
	if err != nil {
		return err
	}
	if v == l.token {
		return l.client.Del(ctx, l.key).Err() // incident: unsafeunlock
	}
	return nil
}

// 核心的 NextID: it waits up to 5 ms for a clock that stepped back and
// refuses beyond; nothing to report, snowflakeclock enabled or not.
const (
	epoch        int64 = 1704067200000 // 2024-01-01 00:00:00 UTC
	workerIDBits uint8 = 10
	seqBits      uint8 = 12
	maxWorkerID  int64 = -1 ^ (-1 << workerIDBits)
	maxSeq       int64 = -1 ^ (-1 << seqBits)
)

type Snowflake struct {
	mu        sync.Mutex
	lastStamp int64
	workerID  int64
	seq       int64
}

func NewSnowflake(workerID int64) (*Snowflake, error) {
	if workerID < 0 || workerID > maxWorkerID {
		return nil, fmt.Errorf("workerID %d out of range", workerID)
	}
	return &Snowflake{workerID: workerID}, nil
}

func (s *Snowflake) NextID() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	now := time.Now().UnixMilli()
	if now < s.lastStamp {
		offset := s.lastStamp - now
		if offset > 5 {
			return 0, fmt.Errorf("clock moved backwards %dms, refused", offset)
		}
		time.Sleep(time.Duration(offset) * time.Millisecond)
		now = time.Now().UnixMilli()
		if now < s.lastStamp {
			return 0, errors.New("clock still backwards after wait")
		}
	}

	if now == s.lastStamp {
		s.seq = (s.seq + 1) & maxSeq
		if s.seq == 0 {
			// 当前毫秒序列号耗尽，等到下一毫秒
			for now <= s.lastStamp {
				now = time.Now().UnixMilli()
			}
		}
	} else {
		s.seq = 0
	}

	s.lastStamp = now
	id := ((now - epoch) << (workerIDBits + seqBits)) |
		(s.workerID << seqBits) |
		s.seq
	return id, nil
}
