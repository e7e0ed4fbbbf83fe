// Spec 001, "分布式锁工程实践".
package specs

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
)

// "不要用 SETNX + EXPIRE 两条命令，中间宕机就会产生永不过期的锁" - the two
// commands the chapter warns against.
func LockWithTwoCommands(ctx context.Context, rdb redis.Cmdable, token string) (bool, error) {
	ok, err := rdb.SetNX(ctx, "lock:order:1001", token, 0).Result() // incident: setnxexpire
	if err != nil || !ok {
		return false, err
	}
	rdb.Expire(ctx, "lock:order:1001", 30*time.Second)
	return true, nil
}

// 加锁失败怎么等: the blocking wait, "放入 main 函数中运行". The loop has a
// deadline; the context of each SETNX does not.
func BlockUntilTimeout() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	token := "uuid-7f3a"
	deadline := time.Now().Add(3 * time.Second)
	locked := false
	for !locked && time.Now().Before(deadline) {
		ok, err := rdb.SetNX(ctx, "lock:order:1001", token, 30*time.Second).Result() // incident: nodeadline
		if err == nil && ok {
			locked = true // 加锁成功
		} else {
			time.Sleep(50 * time.Millisecond) // 间隔重试，避免打爆 Redis
		}
	}
	if !locked {
		log.Println("获取锁超时，快速失败")
	}
}

// 锁粒度: "全局大锁（lock:order），后者会让所有订单串行".
func PayOrder(ctx context.Context, rdb redis.Cmdable, orderID, token string) (bool, error) {
	return rdb.SetNX(ctx, "lock:order", token, 30*time.Second).Result() // incident: globallockkey
}

// 锁 + 幂等 业务模板 (加锁, 校验业务状态, 写库, 释放锁), written the way it goes
// wrong: the "already processed" return skips step 4.
func IssueCoupon(ctx context.Context, rdb redis.Cmdable, userID, activityID, token string, issued func() bool, insert func() error) error {
	key := "lock:coupon:" + userID + ":" + activityID
	ok, err := rdb.SetNX(ctx, key, token, 30*time.Second).Result() // incident: missingrelease
	if err != nil || !ok {
		return err
	}
	if issued() {
		return nil
	}
	if err := insert(); err != nil {
		rdb.Eval(ctx, unlockScript, []string{key}, token)
		return err
	}
	return rdb.Eval(ctx, unlockScript, []string{key}, token).Err()
}
