package instrument_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/locktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// ownerCheckedUnlock deletes the lock only if it still holds this holder's
// token, so that an unlock that arrives late cannot delete the next
// holder's lock.
//
// KEYS[1]: the lock key. ARGV[1]: the holder's token.
// Returns 1 when it deleted the key, 0 when the key held another token or
// none (the lock had expired, or was someone else's).
var ownerCheckedUnlock = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0
`)

// oneShotLockFunc is lock code as services write it: one SET NX PX with a
// random token, no waiting, no renewal. ownerChecked picks the unlock: the
// script above, or a plain DEL (the weakest unlock FromFunc is there to
// wrap).
func oneShotLockFunc(c *redis.Client, ttl time.Duration, ownerChecked bool) instrument.AcquireFunc {
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		token := rand.Text()
		ok, err := c.SetNX(ctx, key, token, ttl).Result()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, instrument.ErrNotAcquired
		}
		if !ownerChecked {
			return func(ctx context.Context) error { return c.Del(ctx, key).Err() }, nil
		}
		return func(ctx context.Context) error {
			n, err := ownerCheckedUnlock.Run(ctx, c, []string{key}, token).Int()
			if err == nil && n == 0 {
				err = fmt.Errorf("%w: the key no longer holds this token", instrument.ErrNotHeld)
			}
			return err
		}, nil
	}
}

// TestConformance_FromFunc runs the conformance suite on FromFunc around a
// one-shot SET NX PX lock on a real Redis, with the checks that cannot apply
// to code FromFunc does not control switched off:
//
//   - fence order (WithoutFenceOrder): FromFunc's Fence is always 0;
//   - refresh (WithoutRefresh): the wrapped code cannot renew, Refresh
//     returns errors.ErrUnsupported;
//   - deletion (no WithLoser): FromFunc cannot see a lock deleted in the
//     store; its Context ends only at FuncTTL;
//   - waiting (WithWaitOptions(Retry)): the wrapped lock makes one attempt,
//     and FromFunc's WaitUntilDeadline calls it once, so the cases that
//     wait for a holder retry instead.
//
// FuncTTL equals the suite's expiry TTL: FromFunc ignores WithTTL (the
// wrapped code sets the TTL), so the expiry cases see FuncTTL end the lease.
//
// Not parallel: the suite's NoGoroutineSurvivesLoss counts the process's goroutines.
func TestConformance_FromFunc(t *testing.T) {
	const ttl = 2 * time.Second
	r := testenv.NewRedis(t)
	for _, tc := range []struct {
		name         string
		ownerChecked bool
	}{
		{"OwnerCheckedUnlock", true},
		{"PlainDelUnlock", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			locktest.Run(t,
				func(t *testing.T) instrument.Locker {
					c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
					t.Cleanup(func() { _ = c.Close() })
					return instrument.FromFunc(oneShotLockFunc(c, ttl, tc.ownerChecked), instrument.FuncTTL(ttl))
				},
				locktest.WithExpiryTTL(ttl),
				locktest.WithoutFenceOrder(),
				locktest.WithoutRefresh(),
				locktest.WithWaitOptions(instrument.Retry(instrument.ConstantBackoff(2*time.Millisecond), 1<<30)),
			)
		})
	}
}
