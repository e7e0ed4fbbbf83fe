// Package clean takes a lock the way lockgov vet wants it: SET NX PX with a
// deadline, a deferred owner-checked release, a per-order key.
package clean

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

var ErrBusy = errors.New("order is being paid")

var release = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0`)

func PayOrder(ctx context.Context, rdb redis.UniversalClient, orderID, token string, pay func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	key := "lock:order:" + orderID
	ok, err := rdb.SetNX(ctx, key, token, 30*time.Second).Result()
	if err != nil {
		return err
	}
	if !ok {
		return ErrBusy
	}
	defer release.Run(context.WithoutCancel(ctx), rdb, []string{key}, token)
	return pay(ctx)
}
