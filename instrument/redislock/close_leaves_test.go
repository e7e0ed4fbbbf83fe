package redislock_test

import (
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestClose_StopsTheLeavesWaitingInAnOutage: many callers give up in an
// outage (a blackholed server), each leaving in the background; at most
// MaxLeaving tries run, each waiting out its timeout, and the rest wait
// for a slot. Close must stop the waiting leaves, not run them one slot at
// a time (a second each here: Close would take callers/MaxLeaving seconds,
// and far longer with thousands waiting). It waits for the tries in flight
// only; goleak (TestMain) checks that nothing outlives it.
func TestClose_StopsTheLeavesWaitingInAnOutage(t *testing.T) {
	const callers = 10 * redislock.MaxLeaving
	l, _, h := giveUpInAnOutage(t, callers)
	eventually(t, "every leave slot to be taken", func() bool {
		_, tries, _ := h.counts()
		return tries >= redislock.MaxLeaving
	})
	_, before, _ := h.counts()
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	_, after, _ := h.counts()
	h.mu.Lock()
	inFlight := h.now
	h.mu.Unlock()
	t.Logf("Close took %v; leave tries: %d before it, %d when it returned, of %d leaves", took, before, after, callers)
	if inFlight != 0 {
		t.Errorf("%d leave tries still in flight after Close returned", inFlight)
	}
	if after >= callers {
		t.Errorf("Close ran every waiting leave (%d tries of %d leaves) instead of stopping them", after, callers)
	}
}
