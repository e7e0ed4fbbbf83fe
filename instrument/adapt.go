package instrument

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lockgov/lockgov/instrument/internal/errchain"
	"github.com/lockgov/lockgov/instrument/internal/leasecore"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
)

// AcquireFunc is lock code that already exists: it takes the lock on key
// and returns the function that releases it. When the lock is held by
// someone else it returns an error wrapping ErrNotAcquired (so that Govern
// counts contention, not failure, and Retry tries again); any other error is
// a failure.
type AcquireFunc func(ctx context.Context, key string) (release func(ctx context.Context) error, err error)

// FuncOption configures FromFunc.
type FuncOption interface {
	applyFunc(*funcConfig)
}

type funcConfig struct {
	ttl time.Duration
}

type funcOptionFunc func(*funcConfig)

func (f funcOptionFunc) applyFunc(c *funcConfig) { f(c) }

// FuncTTL tells FromFunc the TTL the wrapped lock sets in its store. The
// wrapped code does not renew, so the lease's Context ends with ErrLockLost
// at acquisition + d (minus a drift margin of 2 ms + 2%): the moment the
// store may hand the lock to someone else. Without it the Context ends only
// at Release.
func FuncTTL(d time.Duration) FuncOption {
	return funcOptionFunc(func(c *funcConfig) { c.ttl = d })
}

// FromFunc adapts existing lock code to Locker, so that it gets policy,
// spans and metrics from Govern without a rewrite:
//
//	locker := instrument.Govern(instrument.FromFunc(func(ctx context.Context, key string) (func(context.Context) error, error) {
//		l := NewRedisLock(rdb, key, 30*time.Second) // the code you have
//		if ok, err := l.Lock(ctx); err != nil || !ok {
//			return nil, errors.Join(err, instrument.ErrNotAcquired)
//		}
//		return l.Unlock, nil
//	}, instrument.FuncTTL(30*time.Second)))
//
// The key reaches the function as its second argument. What the adapter
// can and cannot add to code it does not control:
//
//   - Release calls the returned release function once; a second Release
//     returns ErrNotHeld without calling it. Do's fallback release and the
//     release of a lease garbage-collected while held (Observer.Leaked) work.
//   - Once FuncTTL has ended the lease (its Context ended with ErrLockLost)
//     the store may have given the lock to someone else, so Release returns
//     ErrNotHeld and never calls the release function: an unlock without an
//     owner check (a plain DEL) would delete the next holder's lock. The
//     release function's context is also bounded by that local deadline.
//     The lock is then left to the store's TTL. A release that was sent
//     before the deadline but reaches the store after the TTL can still
//     hit the next holder if the wrapped unlock does not check ownership:
//     FromFunc cannot add an owner check the wrapped code does not have.
//     A release function that reports an error wrapping ErrNotHeld (its
//     owner check found another holder) ends the lease as lost, as the
//     backends' releases do.
//   - Wait strategies: FailFast and WaitUntilDeadline call acquire once (it
//     waits the way it always did, bounded by ctx); Retry calls it up to
//     MaxAttempts times while it returns ErrNotAcquired, with the backoff.
//     When a call fails after ctx has ended, Acquire returns ErrNotAcquired
//     wrapping ctx's cause and the call's error, as the backends do.
//   - Fence() is 0: the wrapped code has no fencing token. Do not use
//     FromFunc locks where a fence is needed.
//   - Refresh returns an error wrapping errors.ErrUnsupported; TTL, max
//     hold and watchdog options are not passed to the wrapped code (set its
//     TTL with FuncTTL so the lease context reflects it).
//
// Like Govern, FromFunc returns a Locker, not an error: a nil function or
// FuncTTL <= 0 makes every Acquire of the result return ErrInvalidOption.
func FromFunc(acquire AcquireFunc, opts ...FuncOption) Locker {
	var c funcConfig
	set := false
	for _, o := range opts {
		if o != nil {
			o.applyFunc(&c)
			set = true
		}
	}
	var cfgErr error
	switch {
	case acquire == nil:
		cfgErr = fmt.Errorf("%w: instrument.FromFunc: nil acquire func", ErrInvalidOption)
	case set && c.ttl <= 0:
		cfgErr = fmt.Errorf("%w: instrument.FromFunc: FuncTTL %v must be > 0", ErrInvalidOption, c.ttl)
	}
	return &funcLocker{acquire: acquire, cfg: c, err: cfgErr}
}

type funcLocker struct {
	acquire AcquireFunc
	cfg     funcConfig
	err     error
}

func (f *funcLocker) Acquire(ctx context.Context, key string, opts ...AcquireOption) (Lease, error) {
	if f.err != nil {
		return nil, f.err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	cfg, err := ApplyAcquireOptions(opts...)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		if err := context.Cause(ctx); err != nil {
			return nil, fmt.Errorf("instrument: acquire %q: %w: %w", key, ErrNotAcquired, err)
		}
		start := time.Now()
		release, err := f.acquire(ctx, key)
		if err == nil && release == nil {
			err = errors.New("acquire func returned neither a release func nor an error")
		}
		cfg.Observer.Attempt(err == nil)
		if err == nil {
			return newFuncLease(key, release, start, f.cfg.ttl, cfg.Observer), nil
		}
		if cerr := storefail.Ended(ctx); cerr != nil {
			// The caller's context ended while the wrapped code waited or
			// was on the wire (its error may be ctx's, or a read deadline
			// taken from ctx): the wait gave up, as with any backend.
			return nil, fmt.Errorf("instrument: acquire %q: %w: %w (last attempt: %w)", key, ErrNotAcquired, cerr, err)
		}
		if !errchain.Is(err, ErrNotAcquired) || cfg.Wait != WaitRetry || attempt >= cfg.MaxAttempts {
			return nil, fmt.Errorf("instrument: acquire %q: %w", key, err)
		}
		t := time.NewTimer(cfg.Backoff.Delay(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("instrument: acquire %q: %w: %w", key, ErrNotAcquired, context.Cause(ctx))
		}
	}
}

// noFuncTTL stands for "no TTL" without FuncTTL: the lease then ends only
// at Release (its local deadline is 98 years away).
const noFuncTTL = 100 * 365 * 24 * time.Hour

// funcLease is the handle. The lease core and its callbacks reference only
// funcState, so a dropped handle can be collected and released.
type funcLease struct {
	key   string
	lease *leasecore.Lease
}

func (h *funcLease) Key() string                       { return h.key }
func (h *funcLease) Fence() uint64                     { return 0 }
func (h *funcLease) Context() context.Context          { return h.lease.Context() }
func (h *funcLease) Refresh(ctx context.Context) error { return h.lease.Refresh(ctx) }

// Release calls the wrapped release function, unless the lease has already
// ended: after a Release, or after the TTL, when the lock may be someone
// else's and an unlock without an owner check would delete theirs.
func (h *funcLease) Release(ctx context.Context) error { return h.lease.Release(ctx) }

// funcState is what the lease core calls back: the wrapped release function
// and the observer.
type funcState struct {
	release func(ctx context.Context) error
	obs     Observer
	ttl     bool // FuncTTL was set: the lease has a real deadline
	lease   *leasecore.Lease
	leaked  atomic.Bool // the core is releasing a dropped handle
}

func newFuncLease(key string, release func(context.Context) error, start time.Time, ttl time.Duration, obs Observer) *funcLease {
	st := &funcState{release: release, obs: obs, ttl: ttl > 0}
	if ttl <= 0 {
		ttl = noFuncTTL
	}
	st.lease = leasecore.New(leasecore.Config{
		Name: "instrument",
		Key:  key,
		TTL:  ttl,
		// start is taken before the acquire call, so the store's TTL cannot
		// have started earlier.
		Start:  start,
		Events: st,
		// No Renew: the wrapped code cannot renew, so Refresh returns
		// errors.ErrUnsupported and no watchdog runs.
		Release:       st.unlock,
		UnsafeRelease: true, // the wrapped unlock may be a plain DEL
	})
	h := &funcLease{key: key, lease: st.lease}
	leasecore.Track(h, st.lease)
	return h
}

// unlock runs the wrapped release function, bounded by the local deadline
// when FuncTTL set one: past it the store may have handed the lock on, and
// the core then reports the lease lost instead of calling it.
func (st *funcState) unlock(ctx context.Context) error {
	if st.leaked.Load() {
		// The core's leak release waits up to the TTL; the wrapped code
		// gets what Do's fallback release gets.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, releaseTimeout)
		defer cancel()
	}
	if !st.ttl {
		return st.release(ctx)
	}
	deadline := st.lease.Deadline()
	if !time.Now().Before(deadline) {
		// The expiry timer has not run yet (a loaded scheduler), but the
		// TTL is over.
		return fmt.Errorf("%w: its TTL has passed (the wrapped lock does not renew)", ErrNotHeld)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return st.release(ctx)
}

// Renewed, Lost and Leaked make funcState the core's leasecore.Events.
func (st *funcState) Renewed(err error) { st.obs.Renewed(err) }
func (st *funcState) Lost(cause error)  { st.obs.Lost(cause) }
func (st *funcState) Leaked() {
	st.leaked.Store(true)
	st.obs.Leaked()
}
