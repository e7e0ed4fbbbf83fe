package instrument_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// redisLockFunc adapts the hand-written RedisLock of the example.
func redisLockFunc(c *redis.Client, ttl time.Duration, calls *atomic.Int32) instrument.AcquireFunc {
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		if calls != nil {
			calls.Add(1)
		}
		l := NewRedisLock(c, key, ttl)
		ok, err := l.Lock(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, instrument.ErrNotAcquired
		}
		return l.Unlock, nil
	}
}

// unlockingThen is redisLockFunc whose release, once it has unlocked,
// returns err (the unlock's own error, if it fails).
func unlockingThen(c *redis.Client, err error) instrument.AcquireFunc {
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		unlock, lerr := redisLockFunc(c, 10*time.Second, nil)(ctx, key)
		if lerr != nil {
			return nil, lerr
		}
		return func(ctx context.Context) error {
			if uerr := unlock(ctx); uerr != nil {
				return uerr
			}
			return err
		}, nil
	}
}

func TestFromFunc_GovernedRedisLockExcludesAndReleases(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	g := instrument.Govern(instrument.FromFunc(redisLockFunc(c, 10*time.Second, nil), instrument.FuncTTL(10*time.Second)))

	var holders, done atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				err := instrument.Do(withTimeout(t, 20*time.Second), g, "lock:adapt", func(context.Context) error {
					if n := holders.Add(1); n != 1 {
						t.Errorf("%d holders", n)
					}
					time.Sleep(time.Millisecond)
					holders.Add(-1)
					return nil
				}, instrument.Retry(instrument.ConstantBackoff(2*time.Millisecond), 1000))
				if err != nil {
					t.Errorf("Do: %v", err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if done.Load() != 40 {
		t.Fatalf("%d of 40 critical sections ran", done.Load())
	}
	if n, _ := c.Exists(withTimeout(t, time.Second), "lock:adapt").Result(); n != 0 {
		t.Fatal("lock key left behind after the last release")
	}
}

func TestFromFunc_RetryCallsUntilMaxAttemptsAndReleaseTwiceIsNotHeld(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	var calls atomic.Int32
	l := instrument.FromFunc(redisLockFunc(c, 10*time.Second, &calls))
	h, err := l.Acquire(withTimeout(t, 5*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	calls.Store(0)
	_, err = l.Acquire(withTimeout(t, 5*time.Second), "k", instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 3))
	if !errors.Is(err, instrument.ErrNotAcquired) || calls.Load() != 3 {
		t.Fatalf("Retry(3) on a held lock: %v after %d calls", err, calls.Load())
	}
	if err := h.Release(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(withTimeout(t, 5*time.Second)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if !errors.Is(context.Cause(h.Context()), instrument.ErrReleased) {
		t.Fatalf("cause after Release: %v", context.Cause(h.Context()))
	}
	if err := h.Refresh(withTimeout(t, time.Second)); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Refresh: %v, want ErrUnsupported", err)
	}
}

func TestFromFunc_ContextEndsWithLockLostAtTTL(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	l := instrument.FromFunc(redisLockFunc(c, 200*time.Millisecond, nil), instrument.FuncTTL(200*time.Millisecond))
	h, err := l.Acquire(withTimeout(t, 5*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Context().Done():
	case <-time.After(15 * time.Second):
		t.Fatal("context live 15s after its 200ms TTL")
	}
	if !errors.Is(context.Cause(h.Context()), instrument.ErrLockLost) {
		t.Fatalf("cause: %v", context.Cause(h.Context()))
	}
	_ = h.Release(withTimeout(t, time.Second))
}

func TestFromFunc_BadInput(t *testing.T) {
	t.Parallel()
	if _, err := instrument.FromFunc(nil).Acquire(context.Background(), "k"); !errors.Is(err, instrument.ErrInvalidOption) {
		t.Fatalf("nil func: %v", err)
	}
	noop := func(context.Context, string) (func(context.Context) error, error) {
		return func(context.Context) error { return nil }, nil
	}
	if _, err := instrument.FromFunc(noop, instrument.FuncTTL(0)).Acquire(context.Background(), "k"); !errors.Is(err, instrument.ErrInvalidOption) {
		t.Fatalf("FuncTTL(0): %v", err)
	}
	if _, err := instrument.FromFunc(noop).Acquire(context.Background(), ""); !errors.Is(err, instrument.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
}

// plainDelLockFunc is the weakest lock FromFunc is there to wrap: SET NX PX
// to take it, a plain DEL, without an owner check, to give it back.
func plainDelLockFunc(c *redis.Client, ttl time.Duration) instrument.AcquireFunc {
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		ok, err := c.SetNX(ctx, key, "holder", ttl).Result()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, instrument.ErrNotAcquired
		}
		return func(ctx context.Context) error { return c.Del(ctx, key).Err() }, nil
	}
}

// waitLost waits until l's context ends and checks it ended with ErrLockLost.
func waitLost(t *testing.T, l instrument.Lease) {
	t.Helper()
	select {
	case <-l.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lease context still live 10s after its TTL")
	}
	if !errors.Is(context.Cause(l.Context()), instrument.ErrLockLost) {
		t.Fatalf("cause: %v, want ErrLockLost", context.Cause(l.Context()))
	}
}

// Once FuncTTL has ended A's lease the store may give the key to B; A's
// Release (and Do's fallback release) must not run the wrapped unlock, which
// would delete B's lock.
func TestFromFunc_ReleaseAfterTheTTLDoesNotDeleteTheNextHoldersLock(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	const ttl = 200 * time.Millisecond
	l := instrument.FromFunc(plainDelLockFunc(c, ttl), instrument.FuncTTL(ttl))
	ctx := withTimeout(t, 30*time.Second)
	untilFree := instrument.Retry(instrument.ConstantBackoff(5*time.Millisecond), 4000)

	t.Run("Release", func(t *testing.T) {
		a, err := l.Acquire(ctx, "lock:ttl:release")
		if err != nil {
			t.Fatal(err)
		}
		waitLost(t, a)
		b, err := l.Acquire(ctx, "lock:ttl:release", untilFree) // once Redis expired A's key
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx); !errors.Is(err, instrument.ErrNotHeld) {
			t.Errorf("A's Release after its TTL: %v, want ErrNotHeld", err)
		}
		if c.Exists(ctx, "lock:ttl:release").Val() != 1 {
			t.Fatal("A's Release after its TTL deleted B's lock")
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Do", func(t *testing.T) {
		var b instrument.Lease
		err := instrument.Do(ctx, l, "lock:ttl:do", func(fctx context.Context) error {
			select {
			case <-fctx.Done():
			case <-ctx.Done():
				return ctx.Err()
			}
			var err error
			b, err = l.Acquire(ctx, "lock:ttl:do", untilFree)
			return err
		})
		if !errors.Is(err, instrument.ErrLockLost) {
			t.Errorf("Do past the TTL: %v, want ErrLockLost", err)
		}
		if b == nil {
			t.Fatal("B did not acquire")
		}
		if c.Exists(ctx, "lock:ttl:do").Val() != 1 {
			t.Fatal("Do's fallback release after the TTL deleted B's lock")
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

var errReplyLost = errors.New("reply lost (injected after the unlock ran)")

// A release whose reply is lost leaves the lease ended, but fn ran under
// the lock: Do reports the release's error, not ErrLockLost (on which a
// caller would redo the work).
func TestDo_ReleaseWithALostReplyIsNotALossWhileFnRan(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	l := instrument.Govern(instrument.FromFunc(unlockingThen(c, errReplyLost), instrument.FuncTTL(10*time.Second)))
	ctx := withTimeout(t, 10*time.Second)
	ran := false
	err := instrument.Do(ctx, l, "lock:reply", func(context.Context) error { ran = true; return nil })
	if !ran {
		t.Fatalf("fn did not run: %v", err)
	}
	if errors.Is(err, instrument.ErrLockLost) || !errors.Is(err, errReplyLost) {
		t.Fatalf("Do after a release with a lost reply: %v, want the release's error and not ErrLockLost", err)
	}
	if c.Exists(ctx, "lock:reply").Val() != 0 {
		t.Fatal("lock not released")
	}
}

// A FromFunc lease dropped without Release is released when the garbage
// collector finds it, and the observer hears of it once.
func TestFromFunc_DroppedLeaseIsReleasedWhenCollected(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx := withTimeout(t, 20*time.Second)
	var leaked atomic.Int32
	cfg, err := instrument.ApplyAcquireOptions()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = instrument.ObserverFuncs{OnLeaked: func() { leaked.Add(1) }}
	l := instrument.FromFunc(redisLockFunc(c, 10*time.Second, nil), instrument.FuncTTL(10*time.Second))
	func() {
		if _, err := l.Acquire(ctx, "lock:dropped", instrument.WithConfig(cfg)); err != nil {
			t.Fatal(err)
		}
	}()
	for c.Exists(ctx, "lock:dropped").Val() == 1 {
		if ctx.Err() != nil {
			t.Fatal("dropped lease never released")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := leaked.Load(); n != 1 {
		t.Fatalf("%d Leaked events, want 1", n)
	}
}

// A wrapped acquire that is still waiting (or still on the wire) when the
// caller's context ends returns the context's error; FromFunc reports that
// as the wait giving up, like every backend: ErrNotAcquired wrapping the
// context's error, so Govern counts contention and callers match one error.
func TestFromFunc_ContextEndingDuringTheWrappedAcquireIsNotAcquired(t *testing.T) {
	t.Parallel()
	waits := func(ctx context.Context, _ string) (func(context.Context) error, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	for name, wait := range map[string]instrument.AcquireOption{
		"WaitUntilDeadline": instrument.WaitUntilDeadline(),
		"FailFast":          instrument.FailFast(),
		"Retry":             instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 10),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := instrument.FromFunc(waits).Acquire(ctx, "lock:waits", wait)
			if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire: %v, want ErrNotAcquired wrapping DeadlineExceeded", err)
			}
		})
	}
	// A client that turns ctx's deadline into a read deadline fails with
	// its own timeout error, not ctx's.
	errIOTimeout := errors.New("read tcp: i/o timeout")
	timesOut := func(ctx context.Context, _ string) (func(context.Context) error, error) {
		<-ctx.Done()
		return nil, errIOTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := instrument.FromFunc(timesOut).Acquire(ctx, "lock:waits")
	if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errIOTimeout) {
		t.Fatalf("Acquire after a read deadline: %v, want ErrNotAcquired wrapping DeadlineExceeded and the call's error", err)
	}
}
