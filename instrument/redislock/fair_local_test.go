package redislock_test

import (
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestFair_AWaiterOfTheHoldersLockerKeepsItsPlace: Fair promises that
// "every caller queues in Redis in the order it asked, the lock goes only to
// the head of the queue". A waiter on the holder's own Locker asks first,
// a waiter on another Locker second; the first must get the lock first.
// The in-process turn (local.go) is held by the holder's lease, so the
// first waiter never reaches the Redis queue while the lock is held, and
// the release hands the lock to the second.
func TestFair_AWaiterOfTheHoldersLockerKeepsItsPlace(t *testing.T) {
	t.Parallel()
	r, c := setup(t)
	ctx := timeout(t, 30*time.Second)
	const key = "lock:fair-local"
	a := newLocker(t, c, redislock.Fair())
	b := newLocker(t, newClient(t, r.Addr()), redislock.Fair())
	held, err := a.Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Each waiter says it holds the lock before it releases it: the order
	// they finish in is not the order they got it in (the first's release
	// hands the lock to the second, who may finish before the first has).
	order := make(chan string, 2)
	first, firstDone := startWaiter(t, a, key, func() { order <- "first" }) // asks first, on the holder's Locker
	awaitWaiting(t, first, firstDone)
	second, secondDone := startWaiter(t, b, key, func() { order <- "second" })
	// A Fair waiter is waiting once its first attempt failed, and that
	// attempt queued it in Redis: the second is queued here, and so is the
	// first unless it is held back in-process.
	awaitWaiting(t, second, secondDone)
	t.Logf("queue while both wait: %q", c.LRange(ctx, queueKey(key), 0, -1).Val())
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, done := range []<-chan error{firstDone, secondDone} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := <-order; got != "first" {
		t.Fatal("Fair: the waiter that asked second (another Locker) got the lock before the one that asked first (the holder's Locker)")
	}
}
