package instrument_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
)

// TestStoreFailure_FailOpenDoesNotCountAWaiterWhoseDeadlineEndedLocally:
// Redis is down and FailOpen stands a process-local lock in for it. A
// waiter whose store attempt failed with time left degrades, then waits on
// the process-local lock another caller holds until its own deadline ends.
// Its Acquire returns the deadline: the caller gave up, as when its context
// ends on the store, and lockgov_store_degraded_total counts the holder's
// grant alone. (It counted the waiter too: the count ran before the
// process-local Acquire, so a caller whose deadline passed in that gap on a
// loaded machine was counted without a decision, h104's flake in
// TestDeadlineAttack_BlackholedRedisDegradesOnlyCallersWithTimeLeft.)
func TestStoreFailure_FailOpenDoesNotCountAWaiterWhoseDeadlineEndedLocally(t *testing.T) {
	t.Parallel()
	f := newFixture(t, instrument.WithStoreFailure(instrument.FailOpen))
	ctx := withTimeout(t, time.Minute)
	if err := f.redis.Kill(); err != nil {
		t.Fatal(err)
	}
	held, err := f.locker.Acquire(ctx, "lock:order:1")
	if err != nil {
		t.Fatalf("fail open, Redis down: %v, want a process-local lease", err)
	}
	defer held.Release(ctx)
	if held.Fence() != 0 {
		t.Fatalf("fence %d, want 0 (process-local)", held.Fence())
	}

	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := f.locker.Acquire(waitCtx, "lock:order:1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter on the process-local lock: %v, want its deadline", err)
	}
	// The waiter did degrade (not vacuous: its store attempt failed with
	// time left), which its span, the one ended so far, says.
	degradedSpans := 0
	for _, s := range f.spans.Ended() {
		for _, ev := range s.Events() {
			if ev.Name == "store unreachable: process-local lock" {
				degradedSpans++
			}
		}
	}
	if degradedSpans != 1 {
		t.Fatalf("%d ended acquire spans with the degrade event, want 1 (the waiter's; the holder's ends at its release)", degradedSpans)
	}
	// It waited on the process-local lock as a waiter (lockgov_lock_waiters
	// showed it, TestStoreFailure_FailOpenNeverGrantsALocalLockOverAStoreLeaseOfThisProcess
	// waits for that) and is no longer one.
	if v := counter(t, f.reg, "lockgov_lock_waiters", nil); v != 0 {
		t.Errorf("lockgov_lock_waiters = %v after the waiter gave up, want 0", v)
	}
	if n := degradedLocks(t, f.reg); n != 1 {
		t.Fatalf("lockgov_store_degraded_total{component=lock} = %v, want 1 (the holder's grant; the waiter gave up on its own deadline)", n)
	}
}
