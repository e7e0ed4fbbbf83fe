package leasecore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/lockgov/lockgov/instrument/internal/errchain"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
)

// Drift is the margin between the last confirmed expiry and the moment a
// lease's context ends: 2 ms plus 2% of the TTL.
func Drift(ttl time.Duration) time.Duration { return 2*time.Millisecond + ttl/50 }

// Events observe a lease. Every method must be fast and must not block.
type Events interface {
	// Renewed follows each watchdog or manual renewal: nil on success, an
	// error wrapping ErrNotHeld when ownership was proven gone, the
	// transport error otherwise.
	Renewed(err error)
	// Lost is called once when a held lease ends without Release.
	Lost(cause error)
	// Leaked is called once when the handle was garbage-collected while
	// held; the lease is then released.
	Leaked()
}

// Config is what a backend tells the core about one lease.
type Config struct {
	// Name prefixes error messages ("redislock", "etcdlock").
	Name string
	Key  string
	// TTL is the lease TTL the store granted; the watchdog renews every TTL/3.
	TTL time.Duration
	// Drift overrides Drift(TTL) (quorum mode widens it by the Redlock
	// drift factor).
	Drift time.Duration
	// Start is when the call that created the lease was sent: the lease
	// expires at Start + TTL until a renewal confirms more.
	Start time.Time
	// MaxHold stops the watchdog once the lease has been held this long
	// (0: no limit); the lease then expires at its TTL.
	MaxHold time.Duration
	// Watchdog renews the lease every TTL/3 while it is held.
	Watchdog bool
	// Waiting creates the lease before the lock is held (etcd: a session
	// lease that queues): the watchdog keeps it alive, but max hold, the
	// Lost event and the leak cleanup start only with Hold.
	Waiting bool
	// Events observes the lease (may be nil).
	Events Events

	// Renew extends the lease once, owner-checked. It returns the TTL the
	// store confirmed (0: TTL), an error wrapping ErrNotHeld when ownership
	// is proven gone, or the transport error. nil: no renewal (Refresh
	// returns errors.ErrUnsupported, Watchdog is ignored).
	Renew func(ctx context.Context) (time.Duration, error)
	// Refresh is the manual Refresh, when it must check more than the
	// watchdog does (etcd: the key, not only the session lease). nil: Renew.
	Refresh func(ctx context.Context) (time.Duration, error)
	// Release gives the lock up once, owner-checked: nil when released, an
	// error wrapping ErrNotHeld when the lock was not this lease's, the
	// transport error when the outcome is unknown.
	Release func(ctx context.Context) error
	// Store, when set, stands for Renew and Release: one value the
	// backend's per-lease state implements, rather than a closure apiece.
	// Refresh, if set, still overrides the manual Refresh.
	Store Store
	// UnsafeRelease says Release is not owner-checked: once the lease has
	// ended it must not be called (it could delete the next holder's lock).
	UnsafeRelease bool
	// OnEnd runs once when the lease ends, however it ends, after its
	// context is cancelled (stop the backend's goroutines, hand the local
	// turn on). It must not block for long.
	OnEnd func()
	// OnLost runs once, before OnEnd, when a held lease ends by Lose (its
	// local deadline passed, a renewal or its Release found it not owned,
	// the backend saw its key go), when Events.Lost is called: not when
	// it ends by Release, by End or while still waiting. A backend whose
	// store keeps the lease (etcd gives it its whole TTL again after a
	// restart) gives it back here. It must not block for long.
	OnLost func(cause error)
}

// Store renews and releases one lease (see Config.Store); the methods are
// Config.Renew's and Config.Release's.
type Store interface {
	Renew(ctx context.Context) (time.Duration, error)
	Release(ctx context.Context) error
}

// Lease is the lifecycle state of one lease. Backends keep it in the state
// their handle points to, never in the handle itself, so that a dropped
// handle can be collected (see Track).
type Lease struct {
	cfg   Config
	drift time.Duration

	mu sync.Mutex
	// ctx is made on the first Context call (most leases are released
	// without anyone asking for it); stopped says end has cancelled it or
	// will cancel one made later, after reporting a loss.
	ctx     context.Context
	stop    context.CancelCauseFunc
	stopped bool
	held    bool
	heldAt  time.Time
	expires time.Time // last confirmed expiry (monotonic)
	// timer is the lease's one timer: it fires at renewAt when a renewal
	// is scheduled, else at expires - drift (see tick).
	timer    *time.Timer
	renewAt  time.Time     // the next watchdog renewal (zero: none scheduled)
	renewing chan struct{} // non-nil while a renewal runs; closed when it ends
	// cancelRenew ends the running renewal's context (set with renewing):
	// Release cancels it. A context per renewal, not per lease, so that a
	// lease released before its first renewal makes none.
	cancelRenew context.CancelFunc
	ended       bool
	released    bool // Release was called
	maxHeld     bool // the watchdog stopped at max hold
	stopRenew   bool // Release started or StopWatchdog: schedule nothing more
	endedCause  error
	// cleanup is Track's, stopped when the lease ends (tracked says it is
	// set and not stopped yet): see Track.
	cleanup runtime.Cleanup
	tracked bool
}

// New starts the lifecycle of a lease the store granted: the expiry timer
// and, when cfg.Watchdog is set, the watchdog.
func New(cfg Config) *Lease {
	if cfg.Drift == 0 {
		cfg.Drift = Drift(cfg.TTL)
	}
	if cfg.Store != nil {
		cfg.Renew, cfg.Release = nil, nil
	} else {
		if cfg.Renew == nil {
			cfg.Watchdog = false
		}
		if cfg.Refresh == nil {
			cfg.Refresh = cfg.Renew
		}
	}
	c := &Lease{cfg: cfg, drift: cfg.Drift, expires: cfg.Start.Add(cfg.TTL), held: !cfg.Waiting}
	if c.held {
		c.heldAt = cfg.Start
	}
	c.mu.Lock() // the timer may fire before AfterFunc has returned
	// The timer is armed once, for what comes first (see armLocked): arming
	// it for the deadline and then again for the first renewal put it into
	// the runtime's timer heap twice on every acquire.
	now := time.Now()
	next := c.expires.Add(-c.drift)
	if c.renewsLocked() {
		c.renewAt = now.Add(cfg.TTL / 3)
		if c.renewAt.Before(next) {
			next = c.renewAt
		}
	}
	c.timer = time.AfterFunc(next.Sub(now), c.tick)
	c.mu.Unlock()
	return c
}

// armLocked sets the timer to the next thing due: the renewal, or the
// local deadline.
func (c *Lease) armLocked() {
	next := c.expires.Add(-c.drift)
	if !c.renewAt.IsZero() && c.renewAt.Before(next) {
		next = c.renewAt
	}
	c.timer.Reset(time.Until(next))
}

// tick runs when the timer fires: the lease expires when its local
// deadline has passed, the watchdog renews when its time has come, and
// otherwise (a renewal moved the deadline, the watchdog stopped) the timer
// is set again. While a renewal runs, the timer waits for the deadline.
func (c *Lease) tick() {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	now := time.Now()
	if !now.Before(c.expires.Add(-c.drift)) {
		// The timer came late. A renewal due by now that max hold would
		// have refused makes this an expiry at max hold, as renew says.
		if !c.renewAt.IsZero() && !now.Before(c.renewAt) && c.pastMaxHoldLocked() {
			c.maxHeld = true
		}
		c.mu.Unlock()
		c.expire()
		return
	}
	if !c.renewAt.IsZero() && !now.Before(c.renewAt) {
		c.renewAt = time.Time{}
		c.armLocked()
		c.mu.Unlock()
		c.renew()
		return
	}
	c.armLocked()
	c.mu.Unlock()
}

// Track arranges for the lease to be released when handle becomes
// unreachable while held (a caller that dropped it without Release). handle
// must not be reachable from the Lease or from anything the backend's
// callbacks reference.
//
// The cleanup is stopped when the lease ends (released, lost or expired),
// since it would do nothing then. That matters for speed, not just tidiness:
// the runtime keeps a span's cleanups in a list that AddCleanup walks, and a
// cleanup left on every ended handle until the collector frees it kept that
// list long and made the collector queue one call per handle. Measured with
// bench/'s uncontended pairs (16 goroutines, both versions in one process,
// 20 alternating rounds): client CPU per bare pair 53.9 -> 48.0 µs; under
// contention, AddCleanup on the handoff path took 5-11 µs before and 2 µs
// after (BenchmarkTrack shows the same in isolation).
func Track[H any](handle *H, c *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return // ended before the caller got the handle: nothing to release
	}
	c.cleanup, c.tracked = runtime.AddCleanup(handle, (*Lease).leaked, c), true
}

// Context ends when the lease ends, with cause ErrReleased or an error
// wrapping ErrLockLost.
func (c *Lease) Context() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.contextLocked()
}

func (c *Lease) contextLocked() context.Context {
	if c.ctx == nil {
		c.ctx, c.stop = context.WithCancelCause(context.Background())
		if c.stopped {
			c.stop(c.endedCause)
		}
	}
	return c.ctx
}

// Hold marks a Waiting lease held from now: max hold counts from here, and
// a loss is reported.
func (c *Lease) Hold() {
	c.mu.Lock()
	c.held, c.heldAt = true, time.Now()
	c.mu.Unlock()
}

// StopWatchdog stops renewing the lease: it then ends at its last confirmed
// expiry unless Refresh extends it. A renewal in flight completes. etcdlock
// calls it at Hold for WithoutWatchdog: its lease is renewed while it waits
// in the queue (the wait may outlast the TTL), and no longer once held.
func (c *Lease) StopWatchdog() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopRenew = true
	c.renewAt = time.Time{} // the timer, if set for it, only re-arms
}

// HeldAt is when the lease became held (zero while waiting).
func (c *Lease) HeldAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heldAt
}

// Deadline is the local deadline: the last confirmed expiry minus the
// drift margin. Calls made on the lease's behalf should not outlive it.
func (c *Lease) Deadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.expires.Add(-c.drift)
}

// Confirm records that the store confirmed the lease for ttl as of sent
// (a renewal the backend made on its own, e.g. etcd's keepalive).
func (c *Lease) Confirm(sent time.Time, ttl time.Duration) {
	if ttl <= 0 {
		ttl = c.cfg.TTL
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	if e := sent.Add(ttl); e.After(c.expires) {
		c.expires = e
		c.armLocked()
	}
}

// expire runs when the local deadline passes without a confirmed renewal.
func (c *Lease) expire() {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	if time.Until(c.expires.Add(-c.drift)) > 0 {
		c.armLocked() // a renewal moved the deadline after the timer fired
		c.mu.Unlock()
		return
	}
	cause := fmt.Errorf("%w: %q expired without a confirmed renewal", ErrLockLost, c.cfg.Key)
	if c.maxHeld {
		cause = fmt.Errorf("%w: %q held longer than max hold %v", ErrLockLost, c.cfg.Key, c.cfg.MaxHold)
	}
	c.mu.Unlock()
	c.Lose(cause)
}

// Lose ends the lease with cause (which should wrap ErrLockLost) and, if it
// was held, reports the loss — before the context ends, so that whoever
// wakes on the context already sees the loss counted. Later calls do
// nothing.
func (c *Lease) Lose(cause error) { c.end(cause, true) }

// End ends the lease with cause without reporting a loss (an acquire that
// gave up, a Release). It reports whether this call ended it.
func (c *Lease) End(cause error) bool { return c.end(cause, false) }

func (c *Lease) end(cause error, lost bool) bool {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return false
	}
	c.ended, c.endedCause = true, cause
	held := c.held
	c.timer.Stop()
	c.renewAt = time.Time{}
	cleanup, tracked := c.cleanup, c.tracked
	c.tracked = false
	c.mu.Unlock()
	if tracked {
		cleanup.Stop()
	}
	if lost && held && c.cfg.Events != nil {
		c.cfg.Events.Lost(cause)
	}
	c.mu.Lock()
	c.stopped = true
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop(cause)
	}
	if lost && held && c.cfg.OnLost != nil {
		c.cfg.OnLost(cause)
	}
	if c.cfg.OnEnd != nil {
		c.cfg.OnEnd()
	}
	return true
}

// Ended reports whether the lease has ended.
func (c *Lease) Ended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// Cause is why the lease ended (the cause its Context ends with), or nil
// while it has not. It is set the moment the lease ends, before the
// Context is cancelled: a Lose or End that finds the lease already ending
// on another goroutine returns at once, possibly before that goroutine has
// cancelled the Context, and a caller that must name the cause then reads
// it here, not with context.Cause.
func (c *Lease) Cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		return nil
	}
	return c.endedCause
}

// renewsLocked says the watchdog may schedule a renewal.
func (c *Lease) renewsLocked() bool { return c.cfg.Watchdog && !c.ended && !c.stopRenew }

// scheduleRenewLocked arms the watchdog to renew after d.
func (c *Lease) scheduleRenewLocked(d time.Duration) {
	if !c.renewsLocked() {
		return
	}
	c.renewAt = time.Now().Add(d)
	c.armLocked()
}

// renew is the watchdog: the lease's timer (see tick), not a goroutine, so a short critical
// section never starts one. One owner-checked renewal, then the next at
// TTL/3, sooner after a transient failure, never past max hold, never after
// a renewal proved the lock gone.
func (c *Lease) renew() {
	every := c.cfg.TTL / 3
	c.mu.Lock()
	if c.ended || c.stopRenew || c.renewing != nil {
		c.mu.Unlock()
		return
	}
	if c.pastMaxHoldLocked() {
		// The next renewal would carry the lease past max hold: stop
		// renewing and let it expire.
		c.maxHeld = true
		c.mu.Unlock()
		return
	}
	done := make(chan struct{})
	// The renewal's context ends when the lease ends or Release starts.
	rctx, cancel := context.WithCancel(c.contextLocked())
	c.renewing, c.cancelRenew = done, cancel
	c.mu.Unlock()

	err := c.refresh(rctx, false)
	cancel()

	c.mu.Lock()
	c.renewing, c.cancelRenew = nil, nil
	close(done)
	switch {
	case err == nil:
		c.scheduleRenewLocked(every)
	case errchain.Is(err, ErrNotHeld):
		c.mu.Unlock()
		c.Lose(fmt.Errorf("%w: %q is no longer owned by this lease", ErrLockLost, c.cfg.Key))
		return
	default:
		// Transient: try again soon, until the local deadline ends the lease.
		c.scheduleRenewLocked(max(every/4, time.Millisecond))
	}
	c.mu.Unlock()
}

// pastMaxHoldLocked says the next renewal would carry the lease past max
// hold.
func (c *Lease) pastMaxHoldLocked() bool {
	return c.held && c.cfg.MaxHold > 0 && time.Since(c.heldAt)+c.cfg.TTL/3 > c.cfg.MaxHold
}

// refresh runs one renewal bounded by the local deadline: past it the lease
// is lost whatever the store answers. manual says it is the caller's
// Refresh (Config.Refresh when set), not the watchdog's.
func (c *Lease) refresh(ctx context.Context, manual bool) error {
	c.mu.Lock()
	deadline, ended, held, cause := c.expires.Add(-c.drift), c.ended, c.held, c.endedCause
	c.mu.Unlock()
	if ended {
		return fmt.Errorf("%s: refresh %q: %w: %w", c.cfg.Name, c.cfg.Key, ErrNotHeld, cause)
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	var ttl time.Duration
	var err error
	switch {
	case manual && c.cfg.Refresh != nil:
		ttl, err = c.cfg.Refresh(rctx)
	case c.cfg.Store != nil:
		ttl, err = c.cfg.Store.Renew(rctx)
	default:
		ttl, err = c.cfg.Renew(rctx)
	}
	if err == nil {
		c.Confirm(sent, ttl)
	} else {
		err = fmt.Errorf("%s: refresh %q: %w", c.cfg.Name, c.cfg.Key, err)
	}
	if held && c.cfg.Events != nil && storefail.Ended(ctx) == nil { // a caller that gave up is not a failed renewal
		c.cfg.Events.Renewed(err)
	}
	return err
}

// Refresh extends the lease by its TTL if it is still the owner; a refusal
// ends the lease as lost.
func (c *Lease) Refresh(ctx context.Context) error {
	if c.cfg.Refresh == nil && c.cfg.Store == nil {
		return fmt.Errorf("%s: refresh %q: %w", c.cfg.Name, c.cfg.Key, errors.ErrUnsupported)
	}
	err := c.refresh(ctx, true)
	if errchain.Is(err, ErrNotHeld) {
		c.Lose(fmt.Errorf("%w: %q is no longer owned by this lease", ErrLockLost, c.cfg.Key))
	}
	return err
}

// Release stops the watchdog (waiting for a renewal in flight), then
// releases the lock through the backend. A second Release, and with
// UnsafeRelease any Release after the lease ended, returns ErrNotHeld
// without calling the backend.
//
// When ctx ends while a renewal is still in flight, Release returns the
// context's error at once and ends the lease as lost, but the backend's
// release still runs, on that ended ctx, once the renewal has settled: what
// a backend does with a release on an ended context (etcdlock revokes in
// the background, redislock gives the lock back in the background) it
// does here too, instead of leaving the lock to its TTL.
func (c *Lease) Release(ctx context.Context) error {
	c.mu.Lock()
	if c.released {
		c.mu.Unlock()
		return fmt.Errorf("%s: release %q: %w: already released", c.cfg.Name, c.cfg.Key, ErrNotHeld)
	}
	c.released, c.stopRenew = true, true
	c.renewAt = time.Time{}
	inflight, cancelRenew := c.renewing, c.cancelRenew
	ended, cause := c.ended, c.endedCause
	c.mu.Unlock()
	if ended && c.cfg.UnsafeRelease {
		return fmt.Errorf("%s: release %q: %w: the lease had already ended (%w)", c.cfg.Name, c.cfg.Key, ErrNotHeld, cause)
	}
	if inflight != nil {
		cancelRenew()
		select {
		case <-inflight:
		case <-ctx.Done():
			c.End(fmt.Errorf("%w: %q: release interrupted: %w", ErrLockLost, c.cfg.Key, context.Cause(ctx)))
			// The renewal's context is cancelled and it ends soon, but the
			// caller has given up waiting for it, not the lock: release
			// after it, so that it cannot land after the release. Not an
			// UnsafeRelease backend, which must not be called once the
			// lease has ended (none has a renewal: FromFunc cannot renew).
			if !c.cfg.UnsafeRelease {
				go c.releaseAfter(ctx, inflight)
			}
			return fmt.Errorf("%s: release %q: %w", c.cfg.Name, c.cfg.Key, context.Cause(ctx))
		}
	}
	err := c.release(ctx)
	switch {
	case err == nil:
		c.End(ErrReleased)
		return nil
	case errchain.Is(err, ErrNotHeld):
		c.Lose(fmt.Errorf("%w: %q was not owned by this lease at release", ErrLockLost, c.cfg.Key))
		return fmt.Errorf("%s: release %q: %w", c.cfg.Name, c.cfg.Key, err)
	default:
		// The outcome is unknown; with the watchdog stopped the lock ends at
		// its TTL at the latest.
		c.End(fmt.Errorf("%w: %q: release failed: %w", ErrLockLost, c.cfg.Key, err))
		return fmt.Errorf("%s: release %q: %w", c.cfg.Name, c.cfg.Key, err)
	}
}

// release calls the backend's release.
func (c *Lease) release(ctx context.Context) error {
	if c.cfg.Store != nil {
		return c.cfg.Store.Release(ctx)
	}
	return c.cfg.Release(ctx)
}

// releaseAfter is the backend's release of a Release whose ctx ended while
// the renewal in flight had not settled: once it has, on ctx. The lease has
// ended already; the outcome changes nothing of it.
func (c *Lease) releaseAfter(ctx context.Context, inflight <-chan struct{}) {
	<-inflight
	_ = c.release(ctx)
}

// leaked runs when the handle was dropped without Release.
func (c *Lease) leaked() {
	c.mu.Lock()
	skip := c.released || c.ended || !c.held
	c.mu.Unlock()
	if skip {
		return
	}
	if c.cfg.Events != nil {
		c.cfg.Events.Leaked()
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), max(c.cfg.TTL, time.Second))
		defer cancel()
		_ = c.Release(ctx)
	}()
}
