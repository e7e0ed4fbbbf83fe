package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestClose_EndsWaitsBehindAHolderOfTheSameLocker: Close "makes every later
// Acquire fail with ErrClosed. An Acquire waiting for a release notification
// returns ErrClosed at once". A waiter queued in-process behind a holder of
// the same Locker (local.go: only the head contends in Redis) waits for
// that holder's release all the same, but Close does not end its wait: it
// keeps waiting until its deadline or the release, and then takes the lock
// through the closed Locker.
func TestClose_EndsWaitsBehindAHolderOfTheSameLocker(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	ctx := timeout(t, 30*time.Second)
	const key = "lock:close-local"
	l := newLocker(t, c)
	held, err := l.Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiting, done := startWaiter(t, l, key)
	awaitWaiting(t, waiting, done)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, redislock.ErrClosed) {
			t.Fatalf("waiting Acquire after Close = %v, want ErrClosed", err)
		}
	case <-time.After(15 * time.Second):
		// Let it finish so that no goroutine is left behind.
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		err := <-done
		t.Fatalf("a waiter behind a holder of the same Locker still waited 15s after Close; after the release it returned %v (want ErrClosed at Close)", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
