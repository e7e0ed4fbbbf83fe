package leasecore

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
)

// These tests drive the lifecycle with backend functions the test
// controls; the backends' own tests run it against real servers.

type events struct {
	mu      sync.Mutex
	renewed []error
	lost    []error
	leaked  int
}

func (e *events) Renewed(err error) { e.mu.Lock(); e.renewed = append(e.renewed, err); e.mu.Unlock() }
func (e *events) Lost(cause error)  { e.mu.Lock(); e.lost = append(e.lost, cause); e.mu.Unlock() }
func (e *events) Leaked()           { e.mu.Lock(); e.leaked++; e.mu.Unlock() }

func (e *events) counts() (renewed, lost, leaked int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.renewed), len(e.lost), e.leaked
}

// waitDone waits for ctx to end, failing the test after a generous bound.
func waitDone(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(30 * time.Second):
		t.Fatal("lease context did not end")
		return nil
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitRenewing waits for the watchdog's renewal to start (renewing is
// closed by the test's Renew), failing if the lease ends first: with a
// timer that ran later than the TTL's last two thirds, the lease expires
// and no renewal ever starts.
func waitRenewing(t *testing.T, c *Lease, renewing <-chan struct{}) {
	t.Helper()
	select {
	case <-renewing:
	case <-c.Context().Done():
		select {
		case <-renewing:
		default:
			t.Fatalf("the lease ended (%v) before its renewal started", context.Cause(c.Context()))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no renewal started")
	}
}

func okRelease(calls *atomic.Int32) func(context.Context) error {
	return func(context.Context) error { calls.Add(1); return nil }
}

func TestLease_EndsAtTheLocalDeadlineWithoutRenewal(t *testing.T) {
	ev := &events{}
	var rel atomic.Int32
	start := time.Now()
	c := New(Config{Name: "test", Key: "k", TTL: 60 * time.Millisecond, Start: start, Events: ev, Release: okRelease(&rel)})
	cause := waitDone(t, c.Context())
	if !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "expired") {
		t.Fatalf("cause %v, want ErrLockLost (expired)", cause)
	}
	if elapsed := time.Since(start); elapsed < 60*time.Millisecond-Drift(60*time.Millisecond) {
		t.Fatalf("ended after %v, before the TTL minus drift", elapsed)
	}
	if _, lost, _ := ev.counts(); lost != 1 {
		t.Fatalf("%d Lost events, want 1", lost)
	}
	// An owner-checked backend still cleans up after a local loss.
	if err := c.Release(context.Background()); err != nil || rel.Load() != 1 {
		t.Fatalf("Release after loss: %v, %d backend calls; want nil, 1", err, rel.Load())
	}
}

func TestLease_WatchdogRenewsUntilReleaseAndNothingRunsAfterIt(t *testing.T) {
	ev := &events{}
	var renews, rel atomic.Int32
	c := New(Config{Name: "test", Key: "k", TTL: 1500 * time.Millisecond, Start: time.Now(), Watchdog: true, Events: ev,
		Renew:   func(context.Context) (time.Duration, error) { renews.Add(1); return 0, nil },
		Release: okRelease(&rel)})
	waitFor(t, "two renewals", func() bool { return renews.Load() >= 2 })
	if err := c.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(c.Context()); !errors.Is(cause, ErrReleased) {
		t.Fatalf("cause %v, want ErrReleased", cause)
	}
	n := renews.Load()
	if renewed, lost, _ := ev.counts(); renewed < 2 || lost != 0 {
		t.Fatalf("events: %d renewed, %d lost", renewed, lost)
	}
	if err := c.Release(context.Background()); !errors.Is(err, ErrNotHeld) || rel.Load() != 1 {
		t.Fatalf("second Release: %v with %d backend calls; want ErrNotHeld, 1", err, rel.Load())
	}
	if renews.Load() != n {
		t.Fatal("a renewal ran after Release returned")
	}
}

func TestLease_RenewalThatProvesOwnershipGoneEndsTheLease(t *testing.T) {
	ev := &events{}
	c := New(Config{Name: "test", Key: "k", TTL: 300 * time.Millisecond, Start: time.Now(), Watchdog: true, Events: ev,
		Renew:   func(context.Context) (time.Duration, error) { return 0, ErrNotHeld },
		Release: func(context.Context) error { return ErrNotHeld }})
	cause := waitDone(t, c.Context())
	if !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "no longer owned") {
		t.Fatalf("cause %v", cause)
	}
	renewed, lost, _ := ev.counts()
	if renewed != 1 || lost != 1 || !errors.Is(ev.renewed[0], ErrNotHeld) {
		t.Fatalf("events: renewed %v, %d lost", ev.renewed, lost)
	}
}

func TestLease_TransientRenewalErrorsEndItAtTheDeadline(t *testing.T) {
	ev := &events{}
	var tries atomic.Int32
	c := New(Config{Name: "test", Key: "k", TTL: 120 * time.Millisecond, Start: time.Now(), Watchdog: true, Events: ev,
		Renew:   func(context.Context) (time.Duration, error) { tries.Add(1); return 0, errors.New("connection refused") },
		Release: func(context.Context) error { return nil }})
	cause := waitDone(t, c.Context())
	if !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "expired") {
		t.Fatalf("cause %v", cause)
	}
	if tries.Load() < 2 {
		t.Fatalf("%d renewal tries; a transient failure is retried before the deadline", tries.Load())
	}
}

func TestLease_WatchdogStopsAtMaxHold(t *testing.T) {
	c := New(Config{Name: "test", Key: "k", TTL: 90 * time.Millisecond, Start: time.Now(), Watchdog: true, MaxHold: 150 * time.Millisecond,
		Renew:   func(context.Context) (time.Duration, error) { return 0, nil },
		Release: func(context.Context) error { return nil }})
	cause := waitDone(t, c.Context())
	if !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "max hold") {
		t.Fatalf("cause %v, want the max hold loss", cause)
	}
}

func TestLease_UnsafeReleaseIsNeverCalledAfterTheLeaseEnded(t *testing.T) {
	var rel atomic.Int32
	c := New(Config{Name: "test", Key: "k", TTL: 30 * time.Millisecond, Start: time.Now(), UnsafeRelease: true, Release: okRelease(&rel)})
	waitDone(t, c.Context())
	if err := c.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release after the TTL ended the lease: %v, want ErrNotHeld", err)
	}
	if rel.Load() != 0 {
		t.Fatal("the unsafe release ran after the lease ended: it could delete the next holder's lock")
	}
}

func TestLease_ReleaseOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		backend   error
		wantErr   error
		wantCause error
		lostEvent int
	}{
		{"released", nil, nil, ErrReleased, 0},
		{"not ours", ErrNotHeld, ErrNotHeld, ErrLockLost, 1},
		{"unknown", errors.New("i/o timeout"), nil, ErrLockLost, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &events{}
			c := New(Config{Name: "test", Key: "k", TTL: time.Minute, Start: time.Now(), Events: ev,
				Release: func(context.Context) error { return tc.backend }})
			err := c.Release(context.Background())
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) || tc.backend != nil && err == nil || tc.backend == nil && err != nil {
				t.Fatalf("Release: %v", err)
			}
			if cause := context.Cause(c.Context()); !errors.Is(cause, tc.wantCause) {
				t.Fatalf("cause %v, want %v", cause, tc.wantCause)
			}
			if _, lost, _ := ev.counts(); lost != tc.lostEvent {
				t.Fatalf("%d Lost events, want %d", lost, tc.lostEvent)
			}
		})
	}
}

func TestLease_ReleaseWaitsForTheRenewalInFlight(t *testing.T) {
	inRenew := make(chan struct{})
	var renewDone atomic.Bool
	// The renewal starts at a third of the TTL: long enough a TTL that the
	// lease does not expire first on a loaded machine.
	c := New(Config{Name: "test", Key: "k", TTL: 3 * time.Second, Start: time.Now(), Watchdog: true,
		Renew: func(ctx context.Context) (time.Duration, error) {
			close(inRenew)
			<-ctx.Done() // a renewal stuck on the network until cancelled
			renewDone.Store(true)
			return 0, ctx.Err()
		},
		Release: func(context.Context) error {
			if !renewDone.Load() {
				return errors.New("release ran while a renewal was in flight")
			}
			return nil
		}})
	waitRenewing(t, c, inRenew)
	if err := c.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLease_ReleaseOnAnEndedContextReleasesOnceTheRenewalInFlightSettles:
// a Release whose context has already ended finds a renewal in flight that
// does not return on its cancellation yet. Release returns the context's
// error without waiting for it and ends the lease as lost; the backend's
// release still runs, once, after the renewal has returned, on the
// caller's context (a backend decides what a release on an ended context
// sends: etcdlock revokes in the background). Before, it never ran and the
// lock stood for its TTL.
func TestLease_ReleaseOnAnEndedContextReleasesOnceTheRenewalInFlightSettles(t *testing.T) {
	inRenew, letRenew := make(chan struct{}), make(chan struct{})
	var renewDone atomic.Bool
	released := make(chan error, 2)
	c := New(Config{Name: "test", Key: "k", TTL: 3 * time.Second, Start: time.Now(), Watchdog: true,
		Renew: func(ctx context.Context) (time.Duration, error) {
			close(inRenew)
			<-letRenew // stuck on the network, its cancellation not come through
			renewDone.Store(true)
			return 0, ctx.Err()
		},
		Release: func(ctx context.Context) error {
			if !renewDone.Load() {
				released <- errors.New("release ran while a renewal was in flight")
				return nil
			}
			released <- context.Cause(ctx)
			return context.Cause(ctx)
		}})
	waitRenewing(t, c, inRenew)
	ctx, cancel := context.WithCancelCause(context.Background())
	gone := errors.New("request cancelled")
	cancel(gone)
	if err := c.Release(ctx); !errors.Is(err, gone) {
		t.Fatalf("Release: %v, want the context's cause", err)
	}
	if cause := context.Cause(c.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if len(released) != 0 {
		t.Fatal("the backend's release ran before the renewal settled")
	}
	close(letRenew)
	select {
	case err := <-released:
		if !errors.Is(err, gone) {
			t.Fatalf("the backend's release: %v, want it on the caller's ended context", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the backend's release never ran: the lock stands for its TTL")
	}
	if err := c.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if len(released) != 0 {
		t.Fatal("the backend's release ran twice")
	}
}

func TestLease_ConfirmMovesTheDeadlineOnlyForward(t *testing.T) {
	start := time.Now()
	c := New(Config{Name: "test", Key: "k", TTL: time.Minute, Start: start, Release: func(context.Context) error { return nil }})
	defer c.Release(context.Background())
	d0 := c.Deadline()
	c.Confirm(start.Add(-time.Second), time.Minute)
	if !c.Deadline().Equal(d0) {
		t.Fatal("an older confirmation moved the deadline back")
	}
	c.Confirm(start.Add(time.Second), 2*time.Minute)
	if want := start.Add(time.Second + 2*time.Minute - Drift(time.Minute)); !c.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v", c.Deadline(), want)
	}
}

func TestLease_WaitingLeaseReportsNoLossAndMaxHoldCountsFromHold(t *testing.T) {
	ev := &events{}
	c := New(Config{Name: "test", Key: "k", TTL: 30 * time.Millisecond, Start: time.Now(), Waiting: true, Events: ev,
		Release: func(context.Context) error { return nil }})
	if !c.HeldAt().IsZero() {
		t.Fatal("a waiting lease reports a hold time")
	}
	waitDone(t, c.Context())
	if _, lost, _ := ev.counts(); lost != 0 {
		t.Fatal("a lease that was never held reported a loss")
	}
}

func TestLease_StopWatchdogLetsTheLeaseExpire(t *testing.T) {
	var renews atomic.Int32
	c := New(Config{Name: "test", Key: "k", TTL: 150 * time.Millisecond, Start: time.Now(), Watchdog: true,
		Renew:   func(context.Context) (time.Duration, error) { renews.Add(1); return 0, nil },
		Release: func(context.Context) error { return nil }})
	waitFor(t, "a renewal", func() bool { return renews.Load() >= 1 })
	c.StopWatchdog()
	// A watchdog still running would renew it for ever.
	if cause := waitDone(t, c.Context()); !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "expired") {
		t.Fatalf("cause %v, want ErrLockLost (expired)", cause)
	}
}

func TestLease_RefreshUnsupportedWithoutRenew(t *testing.T) {
	c := New(Config{Name: "test", Key: "k", TTL: time.Minute, Start: time.Now(), Release: func(context.Context) error { return nil }})
	defer c.Release(context.Background())
	if err := c.Refresh(context.Background()); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Refresh: %v, want ErrUnsupported", err)
	}
}

type handle struct{ *Lease }

func TestLease_DroppedHandleIsReleased(t *testing.T) {
	ev := &events{}
	released := make(chan struct{})
	func() {
		c := New(Config{Name: "test", Key: "k", TTL: time.Minute, Start: time.Now(), Events: ev,
			Release: func(context.Context) error { close(released); return nil }})
		h := &handle{c}
		Track(h, c)
	}()
	deadline := time.After(30 * time.Second)
	for {
		runtime.GC()
		select {
		case <-released:
			if _, _, leaked := ev.counts(); leaked != 1 {
				t.Fatalf("%d Leaked events, want 1", leaked)
			}
			return
		case <-deadline:
			t.Fatal("a dropped handle was never released")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestLease_EndStopsTheCleanup: a lease that ends (released, or lost) takes
// its handle's cleanup off the runtime's list at once, instead of leaving it
// for the collector to queue and run for nothing (see Track).
func TestLease_EndStopsTheCleanup(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*Lease)
	}{
		{"released", func(c *Lease) { _ = c.Release(context.Background()) }},
		{"lost", func(c *Lease) { c.Lose(ErrLockLost) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Config{Name: "test", Key: "k", TTL: time.Minute, Start: time.Now(), Release: func(context.Context) error { return nil }})
			h := &handle{c}
			Track(h, c)
			if !c.tracked {
				t.Fatal("Track registered no cleanup for a held lease")
			}
			tc.end(c)
			if c.tracked {
				t.Fatal("the cleanup is still registered after the lease ended")
			}
			runtime.KeepAlive(h)
		})
	}
	t.Run("tracked after it ended", func(t *testing.T) {
		c := New(Config{Name: "test", Key: "k", TTL: time.Minute, Start: time.Now(), Release: func(context.Context) error { return nil }})
		_ = c.Release(context.Background())
		h := &handle{c}
		Track(h, c)
		if c.tracked {
			t.Fatal("Track registered a cleanup for a lease that had ended")
		}
	})
}

// BenchmarkTrack is a lease's life as a backend runs it (New, Track,
// Release) while the handles of the last 4096 leases are still uncollected,
// as they are between two collections of a busy process.
func BenchmarkTrack(b *testing.B) {
	var recent [4096]*handle
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c := New(Config{Name: "test", Key: "k", TTL: time.Minute, Start: time.Now(), Release: func(context.Context) error { return nil }})
		h := &handle{c}
		Track(h, c)
		_ = c.Release(context.Background())
		recent[i%len(recent)] = h
		i++
	}
}

// TestLease_RefreshPastTheCallersDeadlineIsNoFailedRenewal: a manual Refresh
// whose caller's deadline has passed (the timer that ends its context not yet
// fired) fails with the client's own timeout. That is the caller giving up,
// not a renewal the store failed: no Renewed event; a live caller's failure
// is one.
func TestLease_RefreshPastTheCallersDeadlineIsNoFailedRenewal(t *testing.T) {
	ev := &events{}
	c := New(Config{Name: "test", Key: "k", TTL: time.Minute, Start: time.Now(), Events: ev,
		Refresh: func(context.Context) (time.Duration, error) { return 0, errors.New("read tcp: i/o timeout") },
		Release: func(context.Context) error { return nil }})
	defer c.Release(context.Background())
	if err := c.Refresh(testenv.DeadlinePassed(t, context.Background(), time.Minute)); err == nil {
		t.Fatal("Refresh: nil error, want the client's timeout")
	}
	if renewed, _, _ := ev.counts(); renewed != 0 {
		t.Fatalf("%d Renewed events for a caller past its deadline, want 0", renewed)
	}
	if err := c.Refresh(context.Background()); err == nil {
		t.Fatal("Refresh: nil error, want the client's timeout")
	}
	if renewed, _, _ := ev.counts(); renewed != 1 {
		t.Fatalf("%d Renewed events for a live caller's failure, want 1", renewed)
	}
}

// blockingLost holds the first Lost call until release is closed: the
// window of an end in flight, after the lease is marked ended and before
// its Context is cancelled.
type blockingLost struct {
	events
	inLost  chan struct{}
	release chan struct{}
}

func (b *blockingLost) Lost(cause error) {
	close(b.inLost)
	<-b.release
	b.events.Lost(cause)
}

// TestCause_IsSetWhileAnotherEndIsStillUnderWay: a Lose that finds the
// lease already ending on another goroutine returns at once, before that
// goroutine has cancelled the Context. A caller that then names why the
// lease ended (etcdlock's waiter, whose queue entry and session end
// together) must get the cause from Cause: context.Cause is still nil
// (etcdlock returned "own session ended: %!w(<nil>)", neither ErrLockLost
// nor ErrNotAcquired, seen once in TestAttack_ThreeMemberCluster_...).
func TestCause_IsSetWhileAnotherEndIsStillUnderWay(t *testing.T) {
	ev := &blockingLost{inLost: make(chan struct{}), release: make(chan struct{})}
	var rel atomic.Int32
	c := New(Config{Name: "test", Key: "k", TTL: time.Hour, Start: time.Now(), Events: ev, Release: okRelease(&rel)})
	if c.Cause() != nil {
		t.Fatalf("Cause of a live lease: %v, want nil", c.Cause())
	}
	first := errors.Join(ErrLockLost, errors.New("session ended"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Lose(first)
	}()
	<-ev.inLost
	c.Lose(errors.Join(ErrLockLost, errors.New("entry deleted")))
	if err := c.Context().Err(); err != nil {
		t.Fatalf("the context ended before the first end cancelled it (%v): the window this test needs is gone", err)
	}
	if got := c.Cause(); got != first {
		t.Errorf("Cause while the first end is under way: %v, want the first cause %v", got, first)
	}
	close(ev.release)
	<-done
	if got := waitDone(t, c.Context()); got != first {
		t.Errorf("context cause: %v, want %v", got, first)
	}
	if got := c.Cause(); got != first {
		t.Errorf("Cause after the end: %v, want %v", got, first)
	}
}

// TestLease_OnLostRunsOnlyWhenAHeldLeaseIsLost: OnLost is how a backend
// tells a loss from the other ends of a lease (etcdlock revokes a lost
// lease there, which a released one may not be: it is pooled for the next
// Acquire). It runs once for a held lease that Lose ends, before OnEnd
// and with the context already ended; never for a Release, an End or a
// waiting lease's loss.
func TestLease_OnLostRunsOnlyWhenAHeldLeaseIsLost(t *testing.T) {
	cases := []struct {
		name    string
		ttl     time.Duration
		waiting bool
		end     func(c *Lease)
		want    int32
	}{
		{"lose while held", time.Minute, false, func(c *Lease) { c.Lose(ErrLockLost); c.Lose(ErrLockLost) }, 1},
		{"local deadline while held", 30 * time.Millisecond, false, func(*Lease) {}, 1},
		{"release", time.Minute, false, func(c *Lease) { _ = c.Release(context.Background()) }, 0},
		{"end", time.Minute, false, func(c *Lease) { c.End(errors.New("gave up")) }, 0},
		{"lose while waiting", time.Minute, true, func(c *Lease) { c.Lose(ErrLockLost) }, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				lost  atomic.Int32
				lease atomic.Pointer[Lease] // the timer may fire before New has returned
				mu    sync.Mutex
				order []string
				ended = make(chan struct{})
			)
			c := New(Config{Name: "test", Key: "k", TTL: tc.ttl, Start: time.Now(), Waiting: tc.waiting,
				Release: func(context.Context) error { return nil },
				OnLost: func(cause error) {
					if l := lease.Load(); !errors.Is(cause, ErrLockLost) || (l != nil && l.Context().Err() == nil) {
						t.Errorf("OnLost(%v) with the context live", cause)
					}
					lost.Add(1)
					mu.Lock()
					order = append(order, "lost")
					mu.Unlock()
				},
				OnEnd: func() { mu.Lock(); order = append(order, "end"); mu.Unlock(); close(ended) },
			})
			lease.Store(c)
			tc.end(c)
			select {
			case <-ended:
			case <-time.After(30 * time.Second):
				t.Fatal("the lease did not end")
			}
			if n := lost.Load(); n != tc.want {
				t.Fatalf("OnLost ran %d times, want %d", n, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.want == 1 && (len(order) != 2 || order[0] != "lost") {
				t.Fatalf("order %v, want OnLost before OnEnd", order)
			}
		})
	}
}
