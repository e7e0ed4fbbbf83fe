package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/errchain/errchaintest"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

func degradedLocks(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "lockgov_store_degraded_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "lock" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestStoreFailure_FailOpenFallsBackToAProcessLocalLock: with Redis up,
// FailOpen changes nothing (a held lock is ErrNotAcquired, not degraded).
// With Redis killed, FailClosed returns the transport error, and FailOpen
// grants a process-local lock (fence 0) that still excludes this process's
// other callers, counting each decision. When Redis returns, acquires go to
// Redis again.
func TestStoreFailure_FailOpenFallsBackToAProcessLocalLock(t *testing.T) {
	t.Parallel()
	f := newFixture(t, instrument.WithStoreFailure(instrument.FailOpen))
	closed, err := instrument.NewGoverned(f.raw, instrument.WithRegisterer(f.reg), instrument.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	ctx := withTimeout(t, 2*time.Minute)

	held, err := f.locker.Acquire(ctx, "lock:order:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.locker.Acquire(ctx, "lock:order:1", instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("fail open, Redis up, lock held: %v, want ErrNotAcquired", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := degradedLocks(t, f.reg); n != 0 {
		t.Fatalf("degraded = %v with Redis up, want 0", n)
	}

	if err := f.redis.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := closed.Acquire(ctx, "lock:order:2", instrument.FailFast()); err == nil || errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("fail closed, Redis down: %v, want the transport error", err)
	}
	local, err := f.locker.Acquire(ctx, "lock:order:2")
	if err != nil {
		t.Fatalf("fail open, Redis down: %v, want a process-local lease", err)
	}
	if local.Fence() != 0 {
		t.Fatalf("process-local lease fence %d, want 0 (no store issued one)", local.Fence())
	}
	if _, err := f.locker.Acquire(ctx, "lock:order:2", instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("second acquire of a process-locally held key: %v, want ErrNotAcquired", err)
	}
	// A waiter gets the key when the holder releases it.
	got := make(chan error, 1)
	go func() {
		l, err := f.locker.Acquire(ctx, "lock:order:2")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	if err := local.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter on the process-local lock: %v", err)
	}
	if err := local.Release(ctx); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if err := instrument.Do(ctx, f.locker, "lock:order:3", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do with Redis down, fail open: %v", err)
	}
	if n := degradedLocks(t, f.reg); n != 4 {
		t.Fatalf("degraded = %v, want 4 (acquire, fail-fast retry, waiter, Do)", n)
	}
	marked := 0
	for _, sp := range f.spans.Ended() {
		for _, kv := range sp.Attributes() {
			if kv.Key == "lock.degraded" && kv.Value.AsBool() {
				marked++
			}
		}
	}
	if marked != 3 {
		t.Fatalf("%d acquire spans marked lock.degraded, want 3 (the granted ones)", marked)
	}

	if err := f.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	for f.client.Ping(ctx).Err() != nil {
		if ctx.Err() != nil {
			t.Fatal("Redis did not answer after the restart")
		}
	}
	l, err := f.locker.Acquire(ctx, "lock:order:2")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Fence() == 0 {
		t.Fatal("after Redis returned the lease has fence 0: still process-local")
	}
	if n := degradedLocks(t, f.reg); n != 4 {
		t.Fatalf("degraded = %v after Redis returned, want still 4", n)
	}
}

// TestStoreFailure_ACallerPastItsDeadlineIsNeverGrantedADegradedLock: the
// client takes its socket deadline from the caller's context, so a caller
// whose deadline has passed gets an "i/o timeout" from the client, which
// looks like a store that did not answer. If the timer that ends the
// context has not fired yet (a loaded machine), ctx.Err() is still nil.
// Fail open must still not grant a process-local lock: the store is up and
// the caller gave up.
func TestStoreFailure_ACallerPastItsDeadlineIsNeverGrantedADegradedLock(t *testing.T) {
	t.Parallel()
	f := newFixture(t, instrument.WithStoreFailure(instrument.FailOpen))
	ctx := testenv.DeadlinePassed(t, withTimeout(t, time.Minute), time.Minute)
	l, err := f.locker.Acquire(ctx, "lock:order:1", instrument.FailFast())
	if err == nil {
		_ = l.Release(withTimeout(t, 5*time.Second))
		t.Fatalf("acquire past the caller's deadline granted a lease (fence %d)", l.Fence())
	}
	if n := degradedLocks(t, f.reg); n != 0 {
		t.Fatalf("degraded = %v, want 0: the caller's deadline is not a store failure (%v)", n, err)
	}
}

// answerLoading answers every SET through a client, once armed, with the
// error reply of a Redis that is loading its data set: the reply comes
// from the server (an EVAL of redis.error_reply sent in its place).
type answerLoading struct{ armed atomic.Bool }

func (h *answerLoading) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *answerLoading) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *answerLoading) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.armed.Load() || cmd.Name() != "set" {
			return next(ctx, cmd)
		}
		return next(ctx, redis.NewCmd(ctx, "eval", "return redis.error_reply(ARGV[1])", 0,
			"LOADING Redis is loading the dataset in memory"))
	}
}

// TestStoreFailure_FailOpenDegradesOnALoadingReplyJoinedAfterErrNotAcquired:
// lock code wrapped with FromFunc joins its client's error with
// ErrNotAcquired, in whichever order it likes. A LOADING reply is a store
// not serving wherever it sits in the join: FailOpen falls back to a
// process-local lock. It did only when the reply was the join's first
// member. With Redis answering, a held lock is still ErrNotAcquired.
func TestStoreFailure_FailOpenDegradesOnALoadingReplyJoinedAfterErrNotAcquired(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	loading := &answerLoading{}
	c.AddHook(loading)
	lock := func(ctx context.Context, key string) (func(context.Context) error, error) {
		l := NewRedisLock(c, key, 10*time.Second)
		if ok, err := l.Lock(ctx); err != nil || !ok {
			return nil, errors.Join(instrument.ErrNotAcquired, err)
		}
		return l.Unlock, nil
	}
	reg := prometheus.NewRegistry()
	g, err := instrument.NewGoverned(instrument.FromFunc(lock, instrument.FuncTTL(10*time.Second)),
		instrument.WithStoreFailure(instrument.FailOpen), instrument.WithRegisterer(reg), instrument.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	ctx := withTimeout(t, time.Minute)

	held, err := g.Acquire(ctx, "lock:order:1", instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Acquire(ctx, "lock:order:1", instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("Redis answering, lock held: %v, want ErrNotAcquired", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := degradedLocks(t, reg); n != 0 {
		t.Fatalf("degraded = %v with Redis answering, want 0", n)
	}

	loading.armed.Store(true)
	local, err := g.Acquire(ctx, "lock:order:2", instrument.FailFast())
	if err != nil {
		t.Fatalf("FailOpen, Redis answering LOADING after ErrNotAcquired in the join: %v, want a process-local lease", err)
	}
	defer local.Release(ctx)
	if n := degradedLocks(t, reg); n != 1 {
		t.Fatalf("degraded = %v, want 1", n)
	}
	if c.Exists(ctx, "lock:order:2").Val() != 0 {
		t.Fatal("the key exists in Redis: the hook did not answer LOADING, the lease is Redis's")
	}
}

// TestStoreFailure_FailOpenNeverGrantsALocalLockOverAStoreLeaseOfThisProcess:
// a goroutine of this process holds a Redis lease on a key (FailFast, so
// that redislock's in-process turn is not taken); Redis is then killed.
// The lease is still valid (its context alive: its TTL has not run out),
// so another goroutine's Acquire of that key under FailOpen must not be
// handed a process-local lock: FailOpen promises mutual exclusion between
// the goroutines of one process, and here Govern itself handed out the
// lease that excludes it. A FailFast acquire is ErrNotAcquired; a waiter
// gets the process-local lock once the Redis lease is released (its
// release cannot reach Redis: the lock is left to its TTL there).
func TestStoreFailure_FailOpenNeverGrantsALocalLockOverAStoreLeaseOfThisProcess(t *testing.T) {
	t.Parallel()
	f := newFixture(t, instrument.WithStoreFailure(instrument.FailOpen))
	ctx := withTimeout(t, 2*time.Minute)
	const key = "lock:order:1"

	held, err := f.locker.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if held.Fence() == 0 {
		t.Fatal("the first lease has fence 0: not Redis's (the test's premise)")
	}
	if err := f.redis.Kill(); err != nil {
		t.Fatal(err)
	}

	if l, err := f.locker.Acquire(ctx, key, instrument.FailFast()); err == nil {
		_ = l.Release(ctx)
		t.Fatalf("Redis down, this process holding the key's Redis lease (context alive: %v): FailOpen granted a process-local lease (fence %d) beside it",
			held.Context().Err() == nil, l.Fence())
	} else if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("Redis down, key held in this process: %v, want ErrNotAcquired", err)
	}
	if err := held.Context().Err(); err != nil {
		t.Fatalf("the Redis lease ended (%v, cause %v) before the test was done: the premise does not hold", err, context.Cause(held.Context()))
	}

	got := make(chan instrument.Lease, 1)
	fail := make(chan error, 1)
	go func() {
		l, err := f.locker.Acquire(ctx, key)
		if err != nil {
			fail <- err
			return
		}
		got <- l
	}()
	// The waiter falls back to the process-local lock and must then wait
	// for the Redis lease, not be granted the key beside it. Redis is
	// down, so the only wait it can be in is the process-local one (the
	// count comes when that lock decides: not yet).
	testenv.WaitFor(t, time.Minute, "the waiter to wait on the process-local lock", func() bool {
		return counter(t, f.reg, "lockgov_lock_waiters", nil) == 1
	})
	select {
	case l := <-got:
		_ = l.Release(ctx)
		t.Fatalf("a waiter was granted a lease (fence %d) while the Redis lease is held", l.Fence())
	case err := <-fail:
		t.Fatalf("waiter: %v", err)
	default:
	}
	_ = held.Release(ctx) // Redis is down: the outcome is unknown, the lock left to its TTL there
	select {
	case l := <-got:
		if l.Fence() != 0 {
			t.Errorf("waiter's lease fence %d, want 0 (process-local)", l.Fence())
		}
		if n := degradedLocks(t, f.reg); n != 2 {
			t.Errorf("degraded = %v, want 2 (the FailFast refusal and the waiter's grant)", n)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case err := <-fail:
		t.Fatalf("waiter, after the Redis lease was released: %v, want a process-local lease", err)
	}
}

// TestStoreFailure_AStoreLeaseThatEndsInTheOutageFreesTheKeyForTheFallback:
// the other half of the rule above. A Redis lease that ends without
// Release while Redis is down (its watchdog cannot renew it and its TTL
// runs out: lost) no longer excludes anyone, in Redis or here, so a
// fallback Acquire waiting for the key gets it, without the holder's
// Release.
func TestStoreFailure_AStoreLeaseThatEndsInTheOutageFreesTheKeyForTheFallback(t *testing.T) {
	t.Parallel()
	f := newFixture(t, instrument.WithStoreFailure(instrument.FailOpen))
	ctx := withTimeout(t, 2*time.Minute)
	const key = "lock:order:1"
	held, err := f.locker.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	if err := f.redis.Kill(); err != nil {
		t.Fatal(err)
	}
	<-held.Context().Done()
	if !errors.Is(context.Cause(held.Context()), instrument.ErrLockLost) {
		t.Fatalf("the Redis lease ended with %v, want ErrLockLost", context.Cause(held.Context()))
	}
	// Waits for the key (the slot is freed when the lease's context ends,
	// not necessarily before this call); never past 30 s.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := f.locker.Acquire(wctx, key)
	if err != nil {
		t.Fatalf("fallback Acquire after the Redis lease was lost: %v, want a process-local lease", err)
	}
	if l.Fence() != 0 {
		t.Errorf("fence %d, want 0 (process-local)", l.Fence())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// gatedLocker is a redislock Locker whose first lease's Release, once
// Redis has released it, waits for gate before it returns, its Context
// ending only then: the moment between a store lease's release in the
// store and Govern's freeing of its process-local slot, held open.
type gatedLocker struct {
	*redislock.Locker
	once     sync.Once
	released chan struct{} // closed once the first lease is released in Redis
	gate     chan struct{} // closed by the test: that Release may return
}

func (g *gatedLocker) Acquire(ctx context.Context, key string, opts ...instrument.AcquireOption) (instrument.Lease, error) {
	l, err := g.Locker.Acquire(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	gated := false
	g.once.Do(func() { gated = true })
	if !gated {
		return l, nil
	}
	lctx, cancel := context.WithCancelCause(context.Background())
	context.AfterFunc(l.Context(), func() {
		if !errors.Is(context.Cause(l.Context()), instrument.ErrReleased) {
			cancel(context.Cause(l.Context())) // lost: ends at once
		}
	})
	return &gatedLease{Lease: l, ctx: lctx, cancel: cancel, g: g}, nil
}

type gatedLease struct {
	instrument.Lease
	ctx    context.Context
	cancel context.CancelCauseFunc
	g      *gatedLocker
}

func (l *gatedLease) Context() context.Context { return l.ctx }

func (l *gatedLease) Release(ctx context.Context) error {
	err := l.Lease.Release(ctx)
	close(l.g.released)
	<-l.g.gate
	l.cancel(instrument.ErrReleased)
	return err
}

// TestStoreFailure_AStoreLeaseGrantedBeforeThePreviousOneFreedItsSlotExcludesTheFallback:
// two goroutines of this process take a key's Redis lease one after the
// other. The store grants the second as soon as the first is released in
// Redis, which can be before Govern has freed the first one's
// process-local slot (its Release has not returned, or the AfterFunc of
// its Context has not run yet). The second lease must still exclude the
// fallback Acquires of the key once Redis is down: the store granted it,
// so the first lease is over, and the slot is the second's.
func TestStoreFailure_AStoreLeaseGrantedBeforeThePreviousOneFreedItsSlotExcludesTheFallback(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true, MaxRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	raw, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	gl := &gatedLocker{Locker: raw, released: make(chan struct{}), gate: make(chan struct{})}
	g, err := instrument.NewGoverned(gl, instrument.WithStoreFailure(instrument.FailOpen),
		instrument.WithRegisterer(prometheus.NewRegistry()), instrument.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	ctx := withTimeout(t, 2*time.Minute)
	const key = "lock:order:1"

	first, err := g.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	releasedFirst := make(chan error, 1)
	go func() { releasedFirst <- first.Release(ctx) }()
	<-gl.released // released in Redis; Govern has not freed its slot yet

	second, err := g.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(time.Minute))
	if err != nil {
		close(gl.gate)
		<-releasedFirst
		t.Fatalf("Acquire after the first lease's release in Redis: %v", err)
	}
	if second.Fence() == 0 {
		t.Fatal("the second lease has fence 0: not Redis's (the test's premise)")
	}
	close(gl.gate)
	if err := <-releasedFirst; err != nil {
		t.Fatalf("the first lease's Release: %v", err)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if second.Context().Err() != nil {
		t.Fatalf("the second lease ended (%v): the premise does not hold", context.Cause(second.Context()))
	}
	if l, err := g.Acquire(ctx, key, instrument.FailFast()); err == nil {
		_ = l.Release(ctx)
		t.Fatalf("Redis down, this process holding the key's second Redis lease: FailOpen granted a process-local lease (fence %d) beside it", l.Fence())
	} else if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("Redis down, key held in this process: %v, want ErrNotAcquired", err)
	}
	_ = second.Release(ctx) // Redis is down: left to its TTL there
	l, err := g.Acquire(ctx, key, instrument.FailFast())
	if err != nil {
		t.Fatalf("fallback Acquire after the second lease was released: %v, want a process-local lease", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStoreFailure_ALockErrorWithANilPointerOrSharedMembersIsClassifiedWithoutAPanic:
// lock code under FromFunc and Govern (FailOpen, Retry) returns, with
// Redis answering "held", ErrNotAcquired joined with its client's error
// and a nil *net.OpError (a variable it never set), or in a DAG of 40
// levels that share their members (2^40 paths), with or without
// ErrNotAcquired in it. Every such Acquire returns its error without a
// panic and without reading a member once per path (storefail.Unavailable
// in Govern, the Retry loop of FromFunc and Govern's count each read the
// error), and is classified as errors.Is would classify it: not acquired
// (retried, counted not_acquired) or an error (counted error), and never
// a store failure (nothing degraded).
func TestStoreFailure_ALockErrorWithANilPointerOrSharedMembersIsClassifiedWithoutAPanic(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx := withTimeout(t, time.Minute)
	if ok, err := NewRedisLock(c, "lock:order:1", time.Minute).Lock(ctx); err != nil || !ok {
		t.Fatalf("holder: %v %v", ok, err)
	}
	// Each Acquire reads the error at most 16 times (storefail.Unavailable,
	// FromFunc's Retry loop, Govern's count, per attempt): 40 joins each.
	dag := func(t *testing.T, leaf error) error {
		err, _ := errchaintest.SharedDAG(t, 40, leaf, 40*16)
		return err
	}
	var lastDial *net.OpError
	scriptErr := errors.New("ERR user_script:1: something else")
	for _, tc := range []struct {
		name        string
		wrap        func(t *testing.T, err error) error
		notAcquired bool
	}{
		{"a nil *net.OpError before ErrNotAcquired", func(_ *testing.T, err error) error { return errors.Join(lastDial, err) }, true},
		{"a nil *net.OpError wrapped", func(_ *testing.T, err error) error { return fmt.Errorf("lock (last dial: %w): %w", lastDial, err) }, true},
		{"a nil *net.OpError beside another error", func(_ *testing.T, _ error) error { return fmt.Errorf("lock: %w (last dial: %w)", scriptErr, lastDial) }, false},
		{"ErrNotAcquired at the foot of a DAG of 40 shared levels", dag, true},
		{"a DAG of 40 shared levels without ErrNotAcquired", func(t *testing.T, _ error) error { return dag(t, scriptErr) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			lock := func(ctx context.Context, key string) (func(context.Context) error, error) {
				calls.Add(1)
				l := NewRedisLock(c, key, 10*time.Second)
				ok, err := l.Lock(ctx)
				if err == nil && ok {
					return l.Unlock, nil
				}
				return nil, tc.wrap(t, errors.Join(instrument.ErrNotAcquired, err))
			}
			reg := prometheus.NewRegistry()
			g, err := instrument.NewGoverned(instrument.FromFunc(lock, instrument.FuncTTL(10*time.Second)),
				instrument.WithStoreFailure(instrument.FailOpen), instrument.WithRegisterer(reg), instrument.WithoutHeartbeat())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.Acquire(ctx, "lock:order:1", instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 3)); err == nil {
				t.Fatal("Acquire of a held lock: nil error")
			}
			result, wantCalls := "error", int32(1)
			if tc.notAcquired {
				result, wantCalls = "not_acquired", 3
			}
			if n := counter(t, reg, "lockgov_lock_acquire_total", map[string]string{"result": result}); n != 1 {
				t.Errorf("%v Acquires counted %s, want 1", n, result)
			}
			if n := calls.Load(); n != wantCalls {
				t.Errorf("lock code called %d times, want %d", n, wantCalls)
			}
			if n := degradedLocks(t, reg); n != 0 {
				t.Errorf("%v degraded decisions, want 0", n)
			}
		})
	}
}

// TestDo_AReleaseErrorWithANilPointerIsReadWithoutAPanic: lock code under
// FromFunc and Govern whose unlock says another owner holds the lock
// (ErrNotHeld) after a nil *net.OpError it never set: the lease's Release
// and Do read it without a panic, as the owner check failing: Do reports
// the lock lost, and the lease's Context ends with ErrLockLost.
func TestDo_AReleaseErrorWithANilPointerIsReadWithoutAPanic(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	var lastDial *net.OpError
	lock := unlockingThen(c, fmt.Errorf("unlock (conn: %w): %w", lastDial, instrument.ErrNotHeld))
	g, err := instrument.NewGoverned(instrument.FromFunc(lock, instrument.FuncTTL(10*time.Second)),
		instrument.WithRegisterer(prometheus.NewRegistry()), instrument.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	ctx := withTimeout(t, 30*time.Second)
	err = instrument.Do(ctx, g, "lock:release", func(context.Context) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "the release found the lock gone") {
		t.Fatalf("Do: %v, want the lock lost at release", err)
	}
	l, err := g.Acquire(ctx, "lock:release")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release: nil error, want the unlock's")
	}
	if cause := context.Cause(l.Context()); cause == nil || !strings.HasPrefix(cause.Error(), instrument.ErrLockLost.Error()) {
		t.Fatalf("lease Context cause %v, want ErrLockLost", cause)
	}
}
