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
	obs   instrument.Observer

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

	// The watchdog is a timer, not a goroutine: a renewal runs on the timer's
	// goroutine only when it fires, so a short critical section never starts
	// one and Release has nothing to wait for unless a renewal is in flight.
	watchdog  bool
	renewTmr  *time.Timer
	renewCtx  context.Context // cancelled when the lease ends or is released
	stopRenew context.CancelFunc
	renewing  chan struct{} // non-nil while a renewal runs; closed when it ends
	noRenew   bool          // Release started: schedule nothing more
}

// drift is the safety margin between the last confirmed expiry and the
// moment the lease context is cancelled: 2 ms plus 2% of the TTL, for clock
// rate differences between this process and Redis and for timer lateness.
func (l *Locker) drift(ttl time.Duration) time.Duration {
	if l.q != nil {
		return l.q.drift(ttl)
	}
	return 2*time.Millisecond + ttl/50
}

func newLease(l *Locker, key string, keys keySet, tok string, fence uint64, sent time.Time, cfg *instrument.AcquireConfig, leaveQueue func()) *lease {
	st := &leaseState{
		l: l, key: key, keys: keys, token: tok, fence: fence,
		ttl: cfg.TTL, drift: l.drift(cfg.TTL), obs: cfg.Observer,
		acquiredAt: sent, maxHold: cfg.MaxHold,
		expires: sent.Add(cfg.TTL), leaveQueue: leaveQueue,
	}
	st.ctx, st.cancel = context.WithCancelCause(context.Background())
	st.renewCtx, st.stopRenew = context.WithCancel(st.ctx)
	st.watchdog = !cfg.NoWatchdog
	st.mu.Lock() // the timers may fire before AfterFunc has returned
	st.timer = time.AfterFunc(time.Until(st.expires.Add(-st.drift)), st.expire)
	st.scheduleRenewLocked(st.ttl / 3)
	st.mu.Unlock()
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

// lose ends the lease with cause, once, and reports the loss.
func (st *leaseState) lose(cause error) {
	if st.end(cause) {
		st.obs.Lost(cause)
	}
}

// scheduleRenewLocked arms the watchdog to renew after d.
func (st *leaseState) scheduleRenewLocked(d time.Duration) {
	if !st.watchdog || st.ended || st.noRenew {
		return
	}
	if st.renewTmr == nil {
		st.renewTmr = time.AfterFunc(d, st.renew)
		return
	}
	st.renewTmr.Reset(d)
}

// renew is the watchdog: one owner-checked renewal, then the next one is
// scheduled at TTL/3, sooner after a transient failure, never after max hold
// or after a renewal proved the lock gone.
func (st *leaseState) renew() {
	every := st.ttl / 3
	st.mu.Lock()
	if st.ended || st.noRenew || st.renewing != nil {
		st.mu.Unlock()
		return
	}
	if st.maxHold > 0 && time.Since(st.acquiredAt)+every > st.maxHold {
		// The next renewal would carry the lease past max hold: stop
		// renewing and let it expire.
		st.held = true
		st.mu.Unlock()
		return
	}
	done := make(chan struct{})
	st.renewing = done
	st.mu.Unlock()

	err := st.refresh(st.renewCtx)

	st.mu.Lock()
	st.renewing = nil
	close(done)
	switch {
	case err == nil:
		st.scheduleRenewLocked(every)
	case errors.Is(err, instrument.ErrNotHeld):
		st.mu.Unlock()
		st.lose(fmt.Errorf("%w: %q is no longer owned by this lease", instrument.ErrLockLost, st.key))
		return
	default:
		// Transient failure: try again soon, until the local deadline ends
		// the lease.
		st.scheduleRenewLocked(max(every/4, time.Millisecond))
	}
	st.mu.Unlock()
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
	ok, err := st.l.refreshOnce(rctx, st.keys, st.token, st.ttl)
	switch {
	case err != nil:
		err = fmt.Errorf("redislock: refresh %q: %w", st.key, err)
	case !ok:
		err = errNotHeld("refresh", st.key)
	default:
		st.mu.Lock()
		if !st.ended {
			st.expires = sent.Add(st.ttl)
			st.timer.Reset(time.Until(st.expires.Add(-st.drift)))
		}
		st.mu.Unlock()
	}
	if ctx.Err() == nil {
		st.obs.Renewed(err)
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
	st.noRenew = true
	if st.renewTmr != nil {
		st.renewTmr.Stop()
	}
	inflight := st.renewing
	st.mu.Unlock()
	if err := st.waitRenewal(ctx, inflight); err != nil {
		return fmt.Errorf("redislock: release %q: %w", st.key, err)
	}
	ok, err := st.l.releaseOnce(ctx, st.keys, st.token, st.ttl)
	if err != nil && !ok {
		// The outcome is unknown; the watchdog is stopped, so the lock ends
		// at its TTL at the latest.
		st.end(fmt.Errorf("%w: %q: release failed: %w", instrument.ErrLockLost, st.key, err))
		return fmt.Errorf("redislock: release %q: %w", st.key, err)
	}
	if !ok {
		st.lose(fmt.Errorf("%w: %q was not owned by this lease at release", instrument.ErrLockLost, st.key))
		return errNotHeld("release", st.key)
	}
	st.end(instrument.ErrReleased)
	return nil
}

// end finishes the lease with cause: timers stopped, context cancelled,
// the local turn handed on. It reports whether this call ended it.
func (st *leaseState) end(cause error) bool {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return false
	}
	st.ended = true
	st.timer.Stop()
	if st.renewTmr != nil {
		st.renewTmr.Stop()
	}
	st.mu.Unlock()
	st.cancel(cause)
	st.leaveLocalQueue()
	return true
}

func (st *leaseState) leaveLocalQueue() {
	if st.leaveQueue != nil {
		st.leaveQueue() // idempotent
	}
}

// waitRenewal cancels a renewal in flight and waits for it to finish, so
// that nothing of the lease runs after Release returns.
func (st *leaseState) waitRenewal(ctx context.Context, inflight chan struct{}) error {
	if inflight == nil {
		return nil
	}
	st.stopRenew()
	select {
	case <-inflight:
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
	st.obs.Leaked()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), st.ttl)
		defer cancel()
		_ = st.Release(ctx)
	}()
}
