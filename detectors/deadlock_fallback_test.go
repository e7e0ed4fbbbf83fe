package detectors_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/fleet"
)

// TestDeadlock_FallbackLocksOfTwoProcessesNeverMeet: under FailOpen a
// store outage gives each process a process-local lock per key (Fallback
// in its heartbeat). a's fallback lock on x and b's fallback lock on x are
// two locks, and neither is the store's lock on x: a fallback wait is
// blocked only by a holder in its own process, and a fallback hold blocks
// only its own process's waiters. Each case is checked with and without
// the per-goroutine holds (HoldsWhileWaiting), on two Detect calls (the
// remembered orders meet too); the control, the same beats without the
// marker, is a deadlock, so the cases are not vacuous.
func TestDeadlock_FallbackLocksOfTwoProcessesNeverMeet(t *testing.T) {
	t.Parallel()
	since := time.Now().Add(-time.Minute)
	held := func(key string, fb bool) fleet.HeldLock {
		return fleet.HeldLock{Key: key, Pattern: key, Backend: "redis", Since: since, Fallback: fb}
	}
	wait := func(key string, fb bool, holds ...string) fleet.WaitingLock {
		return fleet.WaitingLock{Key: key, Pattern: key, Backend: "redis", Since: since, Fallback: fb, HoldsWhileWaiting: holds}
	}
	type beats struct {
		aHeld, bHeld []fleet.HeldLock
		aWait, bWait []fleet.WaitingLock
	}
	cases := []struct {
		name string
		beats
		deadlocks, inversions int // with HoldsWhileWaiting; without it, no orders are known
	}{{
		// Each process holds both keys locally (one goroutine each) and
		// one goroutine waits for the key its sibling holds: in each
		// process a wait that ends when the sibling releases. The code
		// takes x, y in both orders, which is a lock-order inversion of
		// the store's locks all the same.
		name: "both fallback",
		beats: beats{
			aHeld: []fleet.HeldLock{held("lock:x", true), held("lock:y", true)},
			aWait: []fleet.WaitingLock{wait("lock:y", true, "lock:x")},
			bHeld: []fleet.HeldLock{held("lock:y", true), held("lock:x", true)},
			bWait: []fleet.WaitingLock{wait("lock:x", true, "lock:y")},
		},
		inversions: 1,
	}, {
		// a holds x locally while it waits for y in the store (up again,
		// or another store); b holds y in the store and waits there for
		// x, which no one holds in the store.
		name: "fallback hold, store waits",
		beats: beats{
			aHeld: []fleet.HeldLock{held("lock:x", true)},
			aWait: []fleet.WaitingLock{wait("lock:y", false, "lock:x")},
			bHeld: []fleet.HeldLock{held("lock:y", false)},
			bWait: []fleet.WaitingLock{wait("lock:x", false, "lock:y")},
		},
		inversions: 1,
	}, {
		// a waits for y locally; b's store lock on y is not what blocks it.
		name: "store holds, fallback wait",
		beats: beats{
			aHeld: []fleet.HeldLock{held("lock:x", false)},
			aWait: []fleet.WaitingLock{wait("lock:y", true, "lock:x")},
			bHeld: []fleet.HeldLock{held("lock:y", false)},
			bWait: []fleet.WaitingLock{wait("lock:x", false, "lock:y")},
		},
		inversions: 1,
	}, {
		name: "control: the same as store locks",
		beats: beats{
			aHeld: []fleet.HeldLock{held("lock:x", false), held("lock:y", false)},
			aWait: []fleet.WaitingLock{wait("lock:y", false, "lock:x")},
			bHeld: []fleet.HeldLock{held("lock:y", false), held("lock:x", false)},
			bWait: []fleet.WaitingLock{wait("lock:x", false, "lock:y")},
		},
		deadlocks: 1,
	}}
	for _, tc := range cases {
		for _, precise := range []bool{true, false} {
			name := tc.name + "/instance-level"
			if precise {
				name = tc.name + "/holds-while-waiting"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := timeout(t, time.Minute)
				c := newRedis(t)
				a, b := otherBeat("pod-a", 10), otherBeat("pod-b", 20)
				a.Held, b.Held = tc.aHeld, tc.bHeld
				a.Waiting, b.Waiting = cloneWaits(tc.aWait, precise), cloneWaits(tc.bWait, precise)
				putBeat(t, ctx, c, a)
				putBeat(t, ctx, c, b)
				d, err := detectors.NewDeadlock(redisStore(t, c))
				if err != nil {
					t.Fatal(err)
				}
				wantInv := 0
				if precise {
					wantInv = tc.inversions
				}
				for range 2 {
					fs := detect(t, ctx, d)
					if n := len(byKind(fs, detectors.KindDeadlock)); n != tc.deadlocks {
						t.Fatalf("%d deadlock findings, want %d:%s", n, tc.deadlocks, describe(fs))
					}
					if n := len(byKind(fs, detectors.KindLockOrderInversion)); n != wantInv {
						t.Fatalf("%d lock_order_inversion findings, want %d:%s", n, wantInv, describe(fs))
					}
				}
			})
		}
	}
}

// TestDeadlock_ACycleThroughAFallbackWaitInOneProcessIsADeadlock: a
// fallback wait is blocked by its own process's holder, and that edge can
// close a cycle across processes. a's goroutine 1 holds x (store) and
// waits for f locally; a's goroutine 2 holds f locally and waits for y in
// the store; b holds y and waits for x. Each waits for the next for good:
// one deadlock naming both instances.
// (Goroutine 2's hold of f may also be the store lease it took before the
// outage: the process's fallback Acquires wait for that one too.)
func TestDeadlock_ACycleThroughAFallbackWaitInOneProcessIsADeadlock(t *testing.T) {
	t.Parallel()
	for _, fHeld := range []string{"fallback", "store"} {
		t.Run("f held as "+fHeld, func(t *testing.T) {
			t.Parallel()
			cycleThroughAFallbackWait(t, fHeld == "fallback")
		})
	}
}

func cycleThroughAFallbackWait(t *testing.T, fFallback bool) {
	ctx := timeout(t, time.Minute)
	c := newRedis(t)
	since := time.Now().Add(-time.Minute)
	a, b := otherBeat("pod-a", 10), otherBeat("pod-b", 20)
	a.Held = []fleet.HeldLock{{Key: "lock:x", Since: since}, {Key: "lock:f", Since: since, Fallback: fFallback}}
	a.Waiting = []fleet.WaitingLock{
		{Key: "lock:f", Since: since, Fallback: true, HoldsWhileWaiting: []string{"lock:x"}},
		{Key: "lock:y", Since: since, HoldsWhileWaiting: []string{"lock:f"}},
	}
	b.Held = []fleet.HeldLock{{Key: "lock:y", Since: since}}
	b.Waiting = []fleet.WaitingLock{{Key: "lock:x", Since: since, HoldsWhileWaiting: []string{"lock:y"}}}
	putBeat(t, ctx, c, a)
	putBeat(t, ctx, c, b)
	d, err := detectors.NewDeadlock(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	fs := byKind(detect(t, ctx, d), detectors.KindDeadlock)
	if len(fs) != 1 {
		t.Fatalf("%d deadlock findings, want 1:%s", len(fs), describe(fs))
	}
	for _, want := range []string{"pod-a", "pod-b", "lock:x", "lock:y", "lock:f"} {
		if !strings.Contains(fs[0].Detail, want) {
			t.Errorf("deadlock detail does not name %s: %s", want, fs[0].Detail)
		}
	}
}

func cloneWaits(ws []fleet.WaitingLock, holds bool) []fleet.WaitingLock {
	out := make([]fleet.WaitingLock, len(ws))
	copy(out, ws)
	if !holds {
		for i := range out {
			out[i].HoldsWhileWaiting = nil
		}
	}
	return out
}

func byKind(fs []detectors.Finding, kind string) []detectors.Finding {
	var out []detectors.Finding
	for _, f := range fs {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}
