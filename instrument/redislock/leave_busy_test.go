package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/redislock"
)

// busyScript keeps Redis in a script for ARGV[1] microseconds.
const busyScript = `
local t = redis.call('TIME')
local stop = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
while true do
	local n = redis.call('TIME')
	if tonumber(n[1]) * 1000000 + tonumber(n[2]) >= stop then break end
end
return 1`

// TestWait_ALeaveThatRedisAnswersBusyIsTriedAgain: a waiter gives up while
// Redis is running another client's slow script, so its leave.lua is
// answered "BUSY". That is an error reply, but a transient one, like the
// network errors the leave retries: once the script is over, the holder's
// release hands the lock to the waiter's entry (still live), and nobody
// frees it until its TTL (a minute) runs out.
func TestWait_ALeaveThatRedisAnswersBusyIsTriedAgain(t *testing.T) {
	t.Parallel()
	r, admin := setup(t)
	ctx := timeout(t, 2*time.Minute)
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "100").Err(); err != nil {
		t.Fatal(err)
	}
	const key = "lock:leave-busy"
	holder, giveUp := queuedBehindAHolder(t, ctx, admin,
		newLocker(t, newClient(t, r.Addr()), redislock.Fair(), redislock.WithWaiterTimeout(time.Minute)),
		newLocker(t, admin, redislock.Fair()), key)

	// Another client's script keeps Redis busy for 3 s.
	busy := redis.NewClient(&redis.Options{Addr: r.Addr(), ReadTimeout: 10 * time.Second})
	defer busy.Close()
	busyDone := make(chan error, 1)
	go func() { busyDone <- busy.Eval(context.Background(), busyScript, nil, 3_000_000).Err() }()
	waitFor(t, ctx, "Redis to answer BUSY", func() bool {
		return redis.HasErrorPrefix(admin.Ping(ctx).Err(), "BUSY")
	})

	giveUp()
	if err := <-busyDone; err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if admin.Exists(ctx, key).Val() != 1 {
		// A retried leave ran between the script's end and the release:
		// the entry was gone and the release freed the lock. Only a retry
		// can do that (the entry's deadline is a minute away), so this is
		// the fix at work, not a premise that failed.
		return
	}
	// A leave retried with the back-off (1 s at most between tries) frees
	// it within a couple of seconds of the release; 15 s is slack for a
	// loaded machine. Without a retry the key lives out its minute.
	fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	waitFor(t, fctx, "the lock handed to a waiter that gave up to be freed", func() bool { return admin.Exists(ctx, key).Val() == 0 })
}
