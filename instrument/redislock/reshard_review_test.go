package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// reshardMisrouted (h100): a plain *redis.Client pointed at one node of a
// Cluster (a misconfiguration: it follows no redirect) is answered MOVED
// for a key whose slot another primary serves, on every attempt, for good.
// Only a ClusterClient's MOVED or ASK is a resharding (go-redis ran out of
// redirects while the slot moved); a plain client's must fail the Acquire
// at once with Redis's answer, as it did before the resharding retries.
// With them, a waiting Acquire waited out its whole deadline (forever
// without one) and returned ErrNotAcquired with the context's error, the
// MOVED that says what is wrong dropped.
func reshardMisrouted(t *testing.T, cl *testenv.RedisCluster) {
	ctx := timeout(t, 30*time.Second)
	key := "lock:reshard:{misrouted}"
	slot, err := cl.KeySlot(key)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := cl.SlotOwner(slot)
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, testenv.NewRedisClient(t, cl.OtherPrimary(owner).Addr()))
	for _, wait := range []struct {
		name string
		opt  instrument.AcquireOption
	}{
		{"deadline", instrument.WaitUntilDeadline()},
		{"retry", instrument.Retry(instrument.ConstantBackoff(10*time.Millisecond), 1000)},
	} {
		// 3s: long enough that a misrouted waiter that waits is not told
		// apart from one that fails by a race; a fixed build returns at
		// the first answer.
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := l.Acquire(actx, key, wait.opt)
		cancel()
		var reply redis.Error
		if err == nil || !errors.As(err, &reply) || !strings.HasPrefix(reply.Error(), "MOVED ") {
			t.Fatalf("%s: Acquire through a client that follows no redirect = %v; want Redis's MOVED answer at once", wait.name, err)
		}
		if errors.Is(err, instrument.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: Acquire waited out its deadline on a MOVED that never goes away: %v", wait.name, err)
		}
	}
}
