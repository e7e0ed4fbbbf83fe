package redislock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestGiveBack_AMisroutedClientsMOVEDEndsIt (h105): the background give-back
// (Locker.leave) tries again on a resharding answer since h100, but a
// MOVED is one only on a ClusterClient. A plain *redis.Client pointed at a
// Cluster node that does not serve the lock's slot (a misconfiguration, or
// a proxy that passes redirects through) gets MOVED on every try, for good:
// the give-back must end at its first answer, as Acquire and Release do.
// Retried, it would send leave.lua for the whole window (the waiter TTL
// plus the lock's TTL: widened here to ten minutes) and hold one of the
// Locker's bounded leave slots all along.
func TestGiveBack_AMisroutedClientsMOVEDEndsIt(t *testing.T) {
	ctx := timeout(t, 30*time.Second)
	cl := testenv.NewRedisCluster(t, 3)
	key := "lock:reshard:{giveback-misrouted}"
	owner, err := cl.KeyOwner(key)
	if err != nil {
		t.Fatal(err)
	}
	c := testenv.NewRedisClient(t, cl.OtherPrimary(owner).Addr())
	moved := &movedReplies{}
	c.AddHook(moved)
	l := newLocker(t, c)
	redislock.WidenLeaveWindow(l, 10*time.Minute)
	tok := "gonegonegonegonegone00 "
	if err := redislock.GiveBack(ctx, l, key, tok, tok+"1000 x {}"); err != nil {
		t.Fatal(err)
	}
	for redislock.PendingLeaves(l) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("the give-back still runs after %d MOVED answers: a plain client's MOVED retried", moved.n.Load())
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not a synchronisation
	}
	if n := moved.n.Load(); n != 1 {
		t.Fatalf("the give-back got %d MOVED answers; want 1 (it ends at the first)", n)
	}
}

// movedReplies counts the MOVED answers a client gets.
type movedReplies struct{ n atomic.Int64 }

func (h *movedReplies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *movedReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if redis.HasErrorPrefix(err, "MOVED ") {
			h.n.Add(1)
		}
		return err
	}
}
func (h *movedReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if redis.HasErrorPrefix(c.Err(), "MOVED ") {
				h.n.Add(1)
			}
		}
		return err
	}
}
