package redislock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/lockgov/lockgov/instrument"
)

// lease is the handle a caller holds. Everything that runs on its own (the
// watchdog, the expiry timer) references only *leaseState, so a handle the
// caller dropped without Release becomes unreachable; its cleanup then
// releases the lock instead of letting the watchdog renew it forever.
type lease struct {
	*leaseState
}

type leaseState struct {
	l     *Locker
	key   string
	keys  keySet
	token string
	fence uint64
	ttl   time.Duration
	drift time.Duration
	hooks instrument.Hooks

	acquiredAt time.Time
	maxHold    time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	expires  time.Time   // last confirmed expiry (monotonic): send time of the confirming call + TTL
	timer    *time.Timer // fires at expires - drift
	ended    bool        // released, lost or leaked: no more renewals
	released bool        // Release was called
	held     bool        // maxHold reached: the watchdog stopped renewing

	leaveQueue func() // gives the local turn to the next waiter; nil if none

	wdStop context.CancelFunc
	wdDone chan struct{}
}

// driftFor is the safety margin between the last confirmed expiry and the
// moment the lease context is cancelled: 2 ms plus 2% of the TTL, for clock
// rate differences between this process and Redis and for timer lateness.
func driftFor(ttl time.Duration) time.Duration {
	return 2*time.Millisecond + ttl/50
}

func newLease(l *Locker, key string, keys keySet, tok string, fence uint64, sent time.Time, cfg *instrument.AcquireConfig, leaveQueue func()) *lease {
	st := &leaseState{
		l: l, key: key, keys: keys, token: tok, fence: fence,
		ttl: cfg.TTL, drift: driftFor(cfg.TTL), hooks: cfg.Hooks,
		acquiredAt: sent, maxHold: cfg.MaxHold,
		expires: sent.Add(cfg.TTL), leaveQueue: leaveQueue,
	}
	st.ctx, st.cancel = context.WithCancelCause(context.Background())
	st.mu.Lock() // expire may run before AfterFunc has returned
	st.timer = time.AfterFunc(time.Until(st.expires.Add(-st.drift)), st.expire)
	st.mu.Unlock()
	if !cfg.NoWatchdog {
		wctx, stop := context.WithCancel(st.ctx)
		st.wdStop, st.wdDone = stop, make(chan struct{})
		go st.watchdog(wctx)
	}
	h := &lease{st}
	runtime.AddCleanup(h, (*leaseState).leaked, st)
	return h
}

func (st *leaseState) Key() string              { return st.key }
func (st *leaseState) Fence() uint64            { return st.fence }
func (st *leaseState) Context() context.Context { return st.ctx }

// expire runs when the local deadline passes without a confirmed renewal.
func (st *leaseState) expire() {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	if d := time.Until(st.expires.Add(-st.drift)); d > 0 {
		// A renewal moved the deadline after the timer had already fired.
		st.timer.Reset(d)
		st.mu.Unlock()
		return
	}
	cause := fmt.Errorf("%w: %q expired without a confirmed renewal", instrument.ErrLockLost, st.key)
	if st.held {
		cause = fmt.Errorf("%w: %q held longer than max hold %v", instrument.ErrLockLost, st.key, st.maxHold)
	}
	st.mu.Unlock()
	st.lose(cause)
}

// lose ends the lease with cause, once.
func (st *leaseState) lose(cause error) {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	st.ended = true
	st.timer.Stop()
	st.mu.Unlock()
	st.cancel(cause)
	st.leaveLocalQueue()
	if st.hooks.Lost != nil {
		st.hooks.Lost(cause)
	}
}

func (st *leaseState) watchdog(ctx context.Context) {
	defer close(st.wdDone)
	every := st.ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if st.maxHold > 0 && time.Since(st.acquiredAt)+every > st.maxHold {
			// The next renewal would carry the lease past max hold: stop
			// renewing and let it expire.
			st.mu.Lock()
			st.held = true
			st.mu.Unlock()
			return
		}
		err := st.refresh(ctx)
		switch {
		case err == nil:
			t.Reset(every)
		case errors.Is(err, instrument.ErrNotHeld):
			st.lose(fmt.Errorf("%w: %q is no longer owned by this lease", instrument.ErrLockLost, st.key))
			return
		default:
			if ctx.Err() != nil {
				return
			}
			// Transient failure: try again soon, until the local deadline
			// ends the lease.
			t.Reset(max(every/4, time.Millisecond))
		}
	}
}

// refresh runs the owner-checked extension once. Its context is bounded by
// the local deadline: past it the lease is lost whatever Redis answers.
func (st *leaseState) refresh(ctx context.Context) error {
	st.mu.Lock()
	deadline := st.expires.Add(-st.drift)
	ended := st.ended
	st.mu.Unlock()
	if ended {
		return fmt.Errorf("redislock: refresh %q: %w: %w", st.key, instrument.ErrNotHeld, context.Cause(st.ctx))
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	n, err := refreshScript.Run(rctx, st.l.c, []string{st.keys.lock, st.keys.fence},
		st.token, st.ttl.Milliseconds(), (st.ttl + st.l.retention).Milliseconds()).Int64()
	switch {
	case err != nil:
		err = fmt.Errorf("redislock: refresh %q: %w", st.key, err)
	case n == 0:
		err = errNotHeld("refresh", st.key)
	default:
		st.mu.Lock()
		if !st.ended {
			st.expires = sent.Add(st.ttl)
			st.timer.Reset(time.Until(st.expires.Add(-st.drift)))
		}
		st.mu.Unlock()
	}
	if st.hooks.Renewed != nil {
		st.hooks.Renewed(err)
	}
	return err
}

// Refresh extends the lease by its TTL if it is still the owner.
func (st *leaseState) Refresh(ctx context.Context) error {
	err := st.refresh(ctx)
	if errors.Is(err, instrument.ErrNotHeld) {
		st.lose(fmt.Errorf("%w: %q is no longer owned by this lease", instrument.ErrLockLost, st.key))
	}
	return err
}

// Release stops the watchdog, then deletes the lock if this lease still
// owns it and notifies waiters.
func (st *leaseState) Release(ctx context.Context) error {
	st.mu.Lock()
	if st.released {
		st.mu.Unlock()
		return fmt.Errorf("redislock: release %q: %w: already released", st.key, instrument.ErrNotHeld)
	}
	st.released = true
	st.mu.Unlock()
	if err := st.stopWatchdog(ctx); err != nil {
		return fmt.Errorf("redislock: release %q: %w", st.key, err)
	}
	n, err := releaseScript.Run(ctx, st.l.c, []string{st.keys.lock}, st.token, st.keys.channel).Int64()
	if err != nil {
		// The outcome is unknown; the watchdog is stopped, so the lock ends
		// at its TTL at the latest.
		st.end(fmt.Errorf("%w: %q: release failed: %w", instrument.ErrLockLost, st.key, err))
		return fmt.Errorf("redislock: release %q: %w", st.key, err)
	}
	if n == 0 {
		st.lose(fmt.Errorf("%w: %q was not owned by this lease at release", instrument.ErrLockLost, st.key))
		return errNotHeld("release", st.key)
	}
	st.end(instrument.ErrReleased)
	return nil
}

// end finishes a lease that Release ended (no Lost hook).
func (st *leaseState) end(cause error) {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	st.ended = true
	st.timer.Stop()
	st.mu.Unlock()
	st.cancel(cause)
	st.leaveLocalQueue()
}

func (st *leaseState) leaveLocalQueue() {
	if st.leaveQueue != nil {
		st.leaveQueue() // idempotent
	}
}

func (st *leaseState) stopWatchdog(ctx context.Context) error {
	if st.wdStop == nil {
		return nil
	}
	st.wdStop()
	select {
	case <-st.wdDone:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// leaked runs when the caller dropped a held lease without Release.
func (st *leaseState) leaked() {
	st.mu.Lock()
	skip := st.released || st.ended
	st.mu.Unlock()
	if skip {
		return
	}
	if st.hooks.Leaked != nil {
		st.hooks.Leaked()
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), st.ttl)
		defer cancel()
		_ = st.Release(ctx)
	}()
}
