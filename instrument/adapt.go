package instrument

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
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
//   - Wait strategies: FailFast and WaitUntilDeadline call acquire once (it
//     waits the way it always did, bounded by ctx); Retry calls it up to
//     MaxAttempts times while it returns ErrNotAcquired, with the backoff.
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
		if !errors.Is(err, ErrNotAcquired) || cfg.Wait != WaitRetry || attempt >= cfg.MaxAttempts {
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

// funcLease is the handle; funcState is what the timer and the cleanup
// reference, so a dropped handle can be collected and released.
type funcLease struct {
	*funcState
}

type funcState struct {
	key     string
	release func(ctx context.Context) error
	obs     Observer
	ttl     time.Duration

	ctx      context.Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	deadline time.Time // acquisition + TTL - drift; zero without FuncTTL

	mu       sync.Mutex
	released bool // Release was called
	ended    bool // released, or lost at the deadline
}

func newFuncLease(key string, release func(context.Context) error, start time.Time, ttl time.Duration, obs Observer) *funcLease {
	st := &funcState{key: key, release: release, obs: obs, ttl: ttl}
	st.ctx, st.cancel = context.WithCancelCause(context.Background())
	if ttl > 0 {
		// start is taken before the acquire call, so the store's TTL cannot
		// have started earlier.
		st.deadline = start.Add(ttl - 2*time.Millisecond - ttl/50)
		st.mu.Lock()
		st.timer = time.AfterFunc(time.Until(st.deadline), st.expire)
		st.mu.Unlock()
	}
	h := &funcLease{st}
	runtime.AddCleanup(h, (*funcState).leaked, st)
	return h
}

func (st *funcState) Key() string              { return st.key }
func (st *funcState) Fence() uint64            { return 0 }
func (st *funcState) Context() context.Context { return st.ctx }

func (st *funcState) Refresh(context.Context) error {
	return fmt.Errorf("instrument: refresh %q: a FromFunc lock cannot be refreshed: %w", st.key, errors.ErrUnsupported)
}

func (st *funcState) expire() {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	st.ended = true
	st.mu.Unlock()
	st.lose()
}

// lose ends the lease at its deadline; st.ended is already set by the caller.
func (st *funcState) lose() {
	cause := fmt.Errorf("%w: %q: its TTL %v has passed (the wrapped lock does not renew)", ErrLockLost, st.key, st.ttl)
	st.cancel(cause)
	st.obs.Lost(cause)
}

// Release calls the wrapped release function, unless the lease has already
// ended: after a Release, or after the TTL, when the lock may be someone
// else's and an unlock without an owner check would delete theirs.
func (st *funcState) Release(ctx context.Context) error {
	st.mu.Lock()
	if st.released {
		st.mu.Unlock()
		return fmt.Errorf("instrument: release %q: %w: already released", st.key, ErrNotHeld)
	}
	st.released = true
	if st.ended {
		st.mu.Unlock()
		return fmt.Errorf("instrument: release %q: %w: %w", st.key, ErrNotHeld, context.Cause(st.ctx))
	}
	st.ended = true
	if st.timer != nil {
		st.timer.Stop()
	}
	if !st.deadline.IsZero() && !time.Now().Before(st.deadline) {
		// The timer has not run yet (a loaded scheduler), but the TTL is over.
		st.mu.Unlock()
		st.lose()
		return fmt.Errorf("instrument: release %q: %w: %w", st.key, ErrNotHeld, context.Cause(st.ctx))
	}
	st.mu.Unlock()
	if !st.deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, st.deadline)
		defer cancel()
	}
	err := st.release(ctx)
	if err != nil {
		st.cancel(fmt.Errorf("%w: %q: release failed: %w", ErrLockLost, st.key, err))
		return fmt.Errorf("instrument: release %q: %w", st.key, err)
	}
	st.cancel(ErrReleased)
	return nil
}

// leaked releases a handle dropped while held; a lease that already ended
// has nothing left to release.
func (st *funcState) leaked() {
	st.mu.Lock()
	skip := st.ended
	st.mu.Unlock()
	if skip {
		return
	}
	st.obs.Leaked()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_ = st.Release(ctx)
	}()
}
