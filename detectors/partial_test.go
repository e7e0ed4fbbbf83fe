package detectors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/testenv"
)

// twoStores starts Redis A, which a test pauses (its client does not
// retry and takes its deadlines from the context, so a paused A costs a
// Detect its deadline, not more), and Redis B, and returns them with their
// detectors.Stores, named redis://a and redis://b.
func twoStores(t *testing.T) (ra *testenv.Redis, a, b *redis.Client, sa, sb detectors.Store) {
	ra = testenv.NewRedis(t)
	a = redis.NewClient(&redis.Options{Addr: ra.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = a.Close() })
	b = newRedis(t)
	return ra, a, b, redisStore(t, a, detectors.WithAddr("redis://a")), redisStore(t, b, detectors.WithAddr("redis://b"))
}

// detectPartial runs d with redis://a (twoStores' A) paused: Detect waits
// for A until half its deadline, then goes on, and must say so with a
// *PartialError naming A alone.
func detectPartial(t *testing.T, ctx context.Context, d detectors.Detector) ([]detectors.Finding, *detectors.PartialError) {
	t.Helper()
	dctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	fs, err := d.Detect(dctx)
	var pe *detectors.PartialError
	if !errors.As(err, &pe) || len(pe.Stores) != 1 || pe.Stores[0] != "redis://a" {
		t.Fatalf("%s.Detect with A paused: %v (findings %s); want a *PartialError naming redis://a", d.Name(), err, describe(fs))
	}
	return fs, pe
}

// TestPartial_AnUnreadHeartbeatStoreHidesOnlyWhatNeedsIt: the detectors
// read the heartbeats of every store and failed as a whole when one store
// did not answer, so one paused Redis blinded leak detection, skew tiers
// and collisions on every other store. They now go on with the stores
// they read and say what they could not check (*PartialError):
//
//   - Locks on B reports B's new immortal lock, and holder_dead for a
//     holder seen publishing on B only (A was read whole while it was
//     seen, and it was not there), but never for a holder seen on A:
//     a live process must not be called dead because its heartbeat sat on
//     a store that could not be read.
//   - Clock ranks the beats on B; WorkerIDs reports a collision on B.
func TestPartial_AnUnreadHeartbeatStoreHidesOnlyWhatNeedsIt(t *testing.T) {
	ra, a, b, sa, sb := twoStores(t)
	ctx := timeout(t, time.Minute)

	putBeat(t, ctx, a, otherBeat("pod-a", 11)) // publishes into A only
	putBeat(t, ctx, b, otherBeat("pod-b", 12)) // publishes into B only
	for key, v := range map[string]string{"lock:a": deadValue("pod-a", 11), "lock:b": deadValue("pod-b", 12)} {
		if err := b.Set(ctx, key, v, 10*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	locks, err := detectors.NewLocks(sb, detectors.WithHeartbeatsFrom(sa))
	if err != nil {
		t.Fatal(err)
	}
	if fs := detect(t, ctx, locks); len(fs) != 0 {
		t.Fatalf("findings with every holder alive: %s", describe(fs))
	}

	skewed := otherBeat("pod-skew", 13)
	skewed.Tier = "reject"
	skewed.WorkerIDs = nil
	putBeat(t, ctx, b, skewed)
	for i, inst := range []string{"pod-w1", "pod-w2"} { // two instances on B claim one WorkerID
		hb := otherBeat(inst, 20+i)
		hb.WorkerIDs = []fleet.WorkerID{{Service: "svc", ID: 7}}
		putBeat(t, ctx, b, hb)
	}
	if err := ra.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ra.Resume() })
	delBeat(t, ctx, b, "pod-b") // pod-b dies
	if err := b.Set(ctx, "lock:leaked", "someone", 0).Err(); err != nil {
		t.Fatal(err)
	}

	partial := func(d detectors.Detector) ([]detectors.Finding, *detectors.PartialError) {
		t.Helper()
		return detectPartial(t, ctx, d)
	}
	fs, pe := partial(locks)
	if _, ok := byKey(fs, detectors.KindImmortal)["lock:leaked"]; !ok {
		t.Errorf("the lock leaked on B while A is paused is not reported: %s", describe(fs))
	}
	dead := byKey(fs, detectors.KindHolderDead)
	if _, ok := dead["lock:b"]; !ok {
		t.Errorf("lock:b, whose holder published on B only and is gone from it, is not holder_dead: %s", describe(fs))
	}
	if f, ok := dead["lock:a"]; ok {
		t.Errorf("lock:a reported holder_dead while its holder's heartbeat is on A, which could not be read: %s", f.Detail)
	}
	if !pe.Covers(detectors.Finding{Kind: detectors.KindHolderDead, Store: "redis://b", Key: "lock:a"}) ||
		pe.Covers(detectors.Finding{Kind: detectors.KindHolderDead, Store: "redis://b", Key: "lock:b"}) ||
		pe.Covers(detectors.Finding{Kind: detectors.KindImmortal, Store: "redis://b", Key: "lock:leaked"}) {
		t.Errorf("scopes %+v: want holder_dead of lock:a only", pe.Scopes)
	}

	wids, err := detectors.NewWorkerIDs(sb, detectors.WithHeartbeatsFrom(sa))
	if err != nil {
		t.Fatal(err)
	}
	fs, pe = partial(wids)
	if dup := byKey(fs, detectors.KindWorkerIDDuplicate); len(dup) != 1 {
		t.Errorf("workerid with A paused: %s; want the duplicate of WorkerID 7 on B", describe(fs))
	}
	if !pe.Covers(detectors.Finding{Kind: detectors.KindWorkerIDDuplicate, Store: "redis://b"}) {
		t.Errorf("workerid scopes %+v: a duplicate may have a claimant on A", pe.Scopes)
	}

	clock, err := detectors.NewClock(sb, detectors.WithHeartbeatsFrom(sa))
	if err != nil {
		t.Fatal(err)
	}
	fs, pe = partial(clock)
	if len(fs) != 1 || fs[0].Kind != detectors.KindSkewReject || fs[0].Holder == nil || fs[0].Holder.Instance != "pod-skew" {
		t.Errorf("clock with A paused: %s; want skew_reject of pod-skew (on B)", describe(fs))
	}
	if !pe.Covers(detectors.Finding{Kind: detectors.KindSkewReject, Store: "redis://a"}) ||
		pe.Covers(detectors.Finding{Kind: detectors.KindSkewReject, Store: "redis://b"}) {
		t.Errorf("clock scopes %+v: want the findings of A", pe.Scopes)
	}
}

// TestPartial_ADeadlockIsReportedFromAPartialReadOnlyWhenEveryInstanceListsItsHolds:
// an instance that does not say which goroutine holds what is one node
// of the wait-for graph; with a store unread, the beats it has there may
// have said it, and the cycle be none. Of two cycles on B, the one whose
// instances list their holds is reported while A is paused, the other
// only from a complete read.
func TestPartial_ADeadlockIsReportedFromAPartialReadOnlyWhenEveryInstanceListsItsHolds(t *testing.T) {
	ra, _, b, sa, sb := twoStores(t)
	ctx := timeout(t, time.Minute)
	since := time.Now().Add(-time.Minute)
	pair := func(x, y, k1, k2 string, precise bool) {
		for i, p := range [][3]string{{x, k1, k2}, {y, k2, k1}} {
			hb := otherBeat(p[0], 30+i)
			hb.Held = []fleet.HeldLock{{Key: p[1], Backend: "redis", Since: since}}
			w := fleet.WaitingLock{Key: p[2], Backend: "redis", Since: since}
			if precise {
				w.HoldsWhileWaiting = []string{p[1]}
			}
			hb.Waiting = []fleet.WaitingLock{w}
			putBeat(t, ctx, b, hb)
		}
	}
	pair("pod-x", "pod-y", "lock:p1", "lock:p2", true)
	pair("pod-u", "pod-v", "lock:q1", "lock:q2", false)
	d, err := detectors.NewDeadlock(sb, detectors.WithHeartbeatsFrom(sa))
	if err != nil {
		t.Fatal(err)
	}
	if got := byKey(detect(t, ctx, d), detectors.KindDeadlock); len(got) != 2 {
		t.Fatalf("deadlocks from a complete read: %v, want lock:p1 and lock:q1", got)
	}
	if err := ra.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ra.Resume() })
	fs, pe := detectPartial(t, ctx, d)
	got := byKey(fs, detectors.KindDeadlock)
	if _, ok := got["lock:p1"]; !ok || len(got) != 1 {
		t.Errorf("deadlocks with A paused: %s; want lock:p1's only (pod-u and pod-v list no holds)", describe(fs))
	}
	if !pe.Covers(detectors.Finding{Kind: detectors.KindDeadlock, Key: "lock:q1"}) {
		t.Errorf("scopes %+v: want every deadlock", pe.Scopes)
	}
}

// TestPartial_AHolderThatMovedWhileNotWatchedIsNotDead: Locks remembered,
// for each process, every store read whole while it was seen, for as long
// as it remembered the process (a day). A process seen on B only, with A
// read whole, was then taken to publish nowhere but B for good: if it
// moved its heartbeat to A while this detector did not watch (another
// agent led; here: between two terms), and A was unread when the detector
// looked again, its live lock on B was called holder_dead. Only the last
// read counts now, and NewTerm (the agent's, at each term) and a read that
// fails whole forget it; the same move inside a run of reads in which A
// stays unread leaves the holder undecided too.
func TestPartial_AHolderThatMovedWhileNotWatchedIsNotDead(t *testing.T) {
	for _, tc := range []struct {
		name string
		gap  func(t *testing.T, ctx context.Context, locks *detectors.Locks, ra *testenv.Redis)
	}{
		{"new-term", func(t *testing.T, ctx context.Context, locks *detectors.Locks, ra *testenv.Redis) {
			locks.NewTerm()
		}},
		{"reads-with-a-unread", func(t *testing.T, ctx context.Context, locks *detectors.Locks, ra *testenv.Redis) {
			// pod-m still on B while A is unread: this read sees it
			// without A, and A read whole before says nothing after it.
			if err := ra.Pause(); err != nil {
				t.Fatal(err)
			}
			dctx, cancel := context.WithTimeout(ctx, 4*time.Second)
			defer cancel()
			if fs, err := locks.Detect(dctx); len(byKey(fs, detectors.KindHolderDead)) != 0 {
				t.Fatalf("holder_dead while pod-m publishes on B: %s (%v)", describe(fs), err)
			}
			if err := ra.Resume(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ra, a, b, sa, sb := twoStores(t)
			ctx := timeout(t, time.Minute)
			putBeat(t, ctx, b, otherBeat("pod-m", 31)) // on B only; A read whole
			if err := b.Set(ctx, "lock:m", deadValue("pod-m", 31), 10*time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			locks, err := detectors.NewLocks(sb, detectors.WithHeartbeatsFrom(sa))
			if err != nil {
				t.Fatal(err)
			}
			if fs := detect(t, ctx, locks); len(fs) != 0 {
				t.Fatalf("findings with every holder alive: %s", describe(fs))
			}
			tc.gap(t, ctx, locks, ra)
			// pod-m moves its heartbeat to A; A stops answering.
			delBeat(t, ctx, b, "pod-m")
			putBeat(t, ctx, a, otherBeat("pod-m", 31))
			if err := ra.Pause(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ra.Resume() })
			fs, pe := detectPartial(t, ctx, locks)
			if f, ok := byKey(fs, detectors.KindHolderDead)["lock:m"]; ok {
				t.Fatalf("lock:m reported holder_dead while its live holder publishes on A, which could not be read: %s", f.Detail)
			}
			if !pe.Covers(detectors.Finding{Kind: detectors.KindHolderDead, Store: "redis://b", Key: "lock:m"}) {
				t.Errorf("scopes %+v: want lock:m's holder_dead undecided", pe.Scopes)
			}
		})
	}
}
