package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
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
	t.Parallel()
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

// stallLive keeps the store from answering, once armed: every command sent
// on a context that has not ended waits (counted) until unblock is closed,
// whatever its context does meanwhile, as a server that has stopped
// answering holds a client with no deadline. A command on an ended context
// goes on to go-redis, which sends nothing and returns the context's error.
type stallLive struct {
	passThrough
	armed   atomic.Bool
	stalled atomic.Int32
	unblock chan struct{}
}

func (h *stallLive) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && ctx.Err() == nil {
			h.stalled.Add(1)
			<-h.unblock
		}
		return next(ctx, cmd)
	}
}

// TestRelease_AfterCloseOnAnEndedContextReturnsAtOnce: after Close nothing
// runs in the background, so the give-back of a Release whose outcome is
// unknown cannot be left to it. On a context that has already ended,
// Release must not run it in the caller either (it did, detached from the
// context, for up to a second; here the store does not answer at all, and
// it would never return): it returns at once, with an error that says the
// Locker is closed and the lock is left to its TTL, and sends nothing.
func TestRelease_AfterCloseOnAnEndedContextReturnsAtOnce(t *testing.T) {
	t.Parallel()
	for _, quorum := range []bool{false, true} {
		name := "single"
		if quorum {
			name = "quorum"
		}
		t.Run(name, func(t *testing.T) {
			h := &stallLive{unblock: make(chan struct{})}
			var l *redislock.Locker
			var admin redis.UniversalClient
			if quorum {
				nodes := quorumNodes(t, 3)
				cs := quorumClients(t, nodes)
				for _, c := range cs {
					c.AddHook(h)
				}
				l, admin = newQuorumOn(t, cs, redislock.WithNodeTimeout(time.Second)), quorumClients(t, nodes[:1])[0]
			} else {
				r, c := setup(t)
				admin = c
				hooked := newClient(t, r.Addr())
				hooked.AddHook(h)
				l = newLocker(t, hooked)
			}
			ctx := timeout(t, time.Minute)
			const key = "lock:release-after-close"
			reqCtx, cancel := context.WithCancel(ctx)
			lease, err := l.Acquire(reqCtx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			cancel()
			h.armed.Store(true)
			released := make(chan error, 1)
			go func() { released <- lease.Release(reqCtx) }()
			defer func() { close(h.unblock); <-released }()

			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			defer wcancel()
			select {
			case err = <-released:
				released <- err // for the deferred drain
			case <-wctx.Done():
				t.Fatalf("Release after Close on an ended context has not returned while the store does not answer (%d commands waiting for it): it waits for a give-back the caller gave up on", h.stalled.Load())
			}
			if err == nil || !errors.Is(err, redislock.ErrClosed) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "left to its TTL") {
				t.Errorf("Release = %v; want the context's error and ErrClosed, saying the lock is left to its TTL", err)
			}
			if n := h.stalled.Load(); n != 0 {
				t.Errorf("%d commands sent on behalf of a caller whose context had ended", n)
			}
			h.armed.Store(false)
			if pttl := admin.PTTL(ctx, key).Val(); pttl <= 0 {
				t.Errorf("the lock's PTTL is %v, want it left to its TTL", pttl)
			}
		})
	}
}

// giveBackHooks makes a Release's outcome unknown after Close, and watches
// its give-back: release.lua calls (EVALSHA by ReleaseSHA) fail without
// being sent once failRelease is set, as a dial that failed, which leaves
// nothing to say whether an earlier try ran; onLeave, if set, runs before
// each leave.lua call (four keys) and may fail it.
type giveBackHooks struct {
	passThrough
	failRelease atomic.Bool
	onLeave     func(ctx context.Context) error
}

var errNotSent = errors.New("dial tcp: connect: connection refused (the test's hook)")

func (h *giveBackHooks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.failRelease.Load() && runsRelease(cmd) {
			return errNotSent
		}
		a := cmd.Args()
		if h.onLeave != nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(a) > 2 && fmt.Sprint(a[2]) == "4" {
			if err := h.onLeave(ctx); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// TestRelease_AfterCloseGivesBackWithinTheCallersContext: a Release after
// Close whose outcome is unknown, on a context that lives, gives the lock
// back in the caller, before it returns, and only within the caller's
// context: when the caller cancels while the give-back is on its way, the
// give-back's context ends with the caller's cause (it was detached from
// the caller, bounded by a second of its own), and Release says the lock
// is left to its TTL.
func TestRelease_AfterCloseGivesBackWithinTheCallersContext(t *testing.T) {
	t.Parallel()
	t.Run("given-back", func(t *testing.T) {
		t.Parallel()
		r, admin := setup(t)
		h := &giveBackHooks{}
		c := newClient(t, r.Addr())
		c.AddHook(h)
		l := newLocker(t, c)
		ctx := timeout(t, time.Minute)
		const key = "lock:release-after-close-given-back"
		lease, err := l.Acquire(ctx, key, instrument.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		h.failRelease.Store(true)
		if err := lease.Release(ctx); !errors.Is(err, errNotSent) || errors.Is(err, redislock.ErrClosed) {
			t.Errorf("Release = %v; want the release's error alone: the lock was given back", err)
		}
		if admin.Exists(ctx, key).Val() != 0 {
			t.Error("the lock is still there when Release returned: the give-back did not run in the caller")
		}
	})
	t.Run("caller-cancels", func(t *testing.T) {
		t.Parallel()
		r, admin := setup(t)
		h := &giveBackHooks{}
		c := newClient(t, r.Addr())
		c.AddHook(h)
		l := newLocker(t, c)
		ctx := timeout(t, time.Minute)
		const key = "lock:release-after-close-cancelled"
		callerCtx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		lease, err := l.Acquire(callerCtx, key, instrument.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		gaveUp := errors.New("the caller gave up")
		var leaves atomic.Int32
		var seen atomic.Value // the give-back's context's cause once the caller cancelled
		h.onLeave = func(ctx context.Context) error {
			leaves.Add(1)
			cancel(gaveUp) // cancels the contexts derived from it before it returns
			seen.Store(fmt.Sprint(context.Cause(ctx)))
			return context.Cause(ctx)
		}
		h.failRelease.Store(true)
		err = lease.Release(callerCtx)
		if leaves.Load() == 0 {
			t.Fatal("no give-back try in the caller")
		}
		if got := seen.Load(); got != gaveUp.Error() {
			t.Errorf("the give-back's context, once the caller cancelled, ended with %v: want the caller's cause (%v), the caller bounds it", got, gaveUp)
		}
		if !errors.Is(err, errNotSent) || !errors.Is(err, redislock.ErrClosed) || !strings.Contains(err.Error(), "left to its TTL") {
			t.Errorf("Release = %v; want the release's error and ErrClosed, saying the lock is left to its TTL", err)
		}
		if pttl := admin.PTTL(ctx, key).Val(); pttl <= 0 {
			t.Errorf("the lock's PTTL is %v, want it left to its TTL", pttl)
		}
	})
}
