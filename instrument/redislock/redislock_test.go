package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

func timeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestMutualExclusion_NoLostUpdateAndFencesIncrease runs an unprotected
// GET/SET increment under the lock from 32 goroutines on two Lockers with
// separate connections: any overlap of holders loses an update.
func TestMutualExclusion_NoLostUpdateAndFencesIncrease(t *testing.T) {
	t.Parallel()
	r, _ := setup(t)
	const lockers, goroutines, iterations = 2, 16, 500
	const key = "lock:counter"
	data := newClient(t, r.Addr())

	var wg sync.WaitGroup
	var errs atomic.Int64
	var fenceViolations atomic.Int64
	for i := range lockers {
		l := newLocker(t, newClient(t, r.Addr()), redislock.WithInstance(fmt.Sprintf("locker-%d", i)))
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range iterations {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					lease, err := l.Acquire(ctx, key, instrument.WithTTL(10*time.Second))
					if err != nil {
						cancel()
						errs.Add(1)
						t.Error(err)
						return
					}
					// The critical section: read-modify-write with no
					// atomicity of its own, plus the fence check.
					n, _ := data.Get(ctx, "counter").Int64()
					last, _ := data.Get(ctx, "last-fence").Uint64()
					if lease.Fence() <= last {
						fenceViolations.Add(1)
					}
					data.Set(ctx, "counter", n+1, 0)
					data.Set(ctx, "last-fence", lease.Fence(), 0)
					if err := lease.Release(ctx); err != nil {
						t.Error(err)
					}
					cancel()
				}
			}()
		}
	}
	wg.Wait()
	if errs.Load() > 0 {
		t.Fatalf("%d acquisitions failed", errs.Load())
	}
	got, err := data.Get(context.Background(), "counter").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(lockers * goroutines * iterations); got != want {
		t.Errorf("counter = %d, want %d: %d updates lost to overlapping holders", got, want, want-got)
	}
	if v := fenceViolations.Load(); v > 0 {
		t.Errorf("%d holders saw a fence not above their predecessor's", v)
	}
}

// TestRelease_DoesNotDeleteAnotherOwnersLock is the spec's incident: A runs
// past its TTL, the lock expires, B takes it, A finishes and releases.
func TestRelease_DoesNotDeleteAnotherOwnersLock(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 10*time.Second)

	a, err := l.Acquire(ctx, "lock:quota:7", instrument.WithTTL(100*time.Millisecond), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	<-a.Context().Done()
	if !errors.Is(context.Cause(a.Context()), instrument.ErrLockLost) {
		t.Fatalf("A's cause = %v, want ErrLockLost", context.Cause(a.Context()))
	}
	b, err := l.Acquire(ctx, "lock:quota:7", instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	before := c.Get(ctx, "lock:quota:7").Val()

	if err := a.Release(ctx); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("A.Release = %v, want ErrNotHeld", err)
	}
	if after := c.Get(ctx, "lock:quota:7").Val(); after != before || after == "" {
		t.Fatalf("B's lock changed by A's Release: %q -> %q", before, after)
	}
	if b.Context().Err() != nil {
		t.Fatalf("B's lease ended: %v", context.Cause(b.Context()))
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("fence B %d <= fence A %d", b.Fence(), a.Fence())
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRefresh_NeverExtendsAnotherOwnersLock: a bare EXPIRE would set B's
// one-minute lock to A's 100 ms.
func TestRefresh_NeverExtendsAnotherOwnersLock(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 10*time.Second)

	a, err := l.Acquire(ctx, "k", instrument.WithTTL(100*time.Millisecond), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	<-a.Context().Done()
	b, err := l.Acquire(ctx, "k", instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(ctx); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("A.Refresh = %v, want ErrNotHeld", err)
	}
	if pttl := c.PTTL(ctx, "k").Val(); pttl < 50*time.Second {
		t.Fatalf("B's TTL is %v after A's Refresh: A extended (shortened) B's lock", pttl)
	}
	// Also while A has not noticed its loss yet: a manual Refresh on a lease
	// whose key was taken over must be refused by the owner check itself.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a2, err := l.Acquire(ctx, "k", instrument.WithTTL(time.Minute), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, "k", "someone-else 1 {}", time.Minute)
	if err := a2.Refresh(ctx); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("Refresh of a taken-over key = %v, want ErrNotHeld", err)
	}
	if v := c.Get(ctx, "k").Val(); v != "someone-else 1 {}" {
		t.Fatalf("taken-over value changed to %q", v)
	}
	if !errors.Is(context.Cause(a2.Context()), instrument.ErrLockLost) {
		t.Fatalf("cause after refused refresh = %v, want ErrLockLost", context.Cause(a2.Context()))
	}
}

// TestFences_NoPermanentKeys locks 10,000 distinct keys and checks that every
// key left in Redis has a TTL, then that fences still increase on a key whose
// counter has expired.
func TestFences_NoPermanentKeys(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 2*time.Minute)

	const keys, workers = 10000, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys; i += workers {
				lease, err := l.Acquire(ctx, "lock:order:"+strconv.Itoa(i), instrument.FailFast())
				if err != nil {
					t.Error(err)
					return
				}
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var n int
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
		if ttl := c.PTTL(ctx, iter.Val()).Val(); ttl < 0 {
			t.Fatalf("key %q has no TTL (PTTL %v): one permanent key per lock key", iter.Val(), ttl)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no fence counters at all: the test checked nothing")
	}

	short := newLocker(t, c, redislock.WithFenceRetention(20*time.Millisecond))
	first, err := short.Acquire(ctx, "lock:order:x", instrument.WithTTL(50*time.Millisecond), instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for c.Exists(ctx, "{lock:order:x}:fence").Val() == 1 {
		time.Sleep(10 * time.Millisecond)
	}
	second, err := short.Acquire(ctx, "lock:order:x", instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	if second.Fence() <= first.Fence() {
		t.Fatalf("fence after the counter expired %d <= %d", second.Fence(), first.Fence())
	}
}

// TestBlackhole_LeaseLostNoLaterThanOtherAcquires cuts A off from Redis
// while it holds the lock: A must know it lost the lock before B has it.
func TestBlackhole_LeaseLostNoLaterThanOtherAcquires(t *testing.T) {
	t.Parallel()
	r, cb := setup(t)
	p := testenv.NewProxy(t, r.Addr())
	ca := newClient(t, p.Addr())
	la, lb := newLocker(t, ca), newLocker(t, cb)
	ctx := timeout(t, 20*time.Second)

	// A 2 s TTL gives a 42 ms drift margin: room for timer lateness on a
	// loaded machine between A's loss timer and B's wake-up at the expiry.
	a, err := la.Acquire(ctx, "lock:quota:1", instrument.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	defer p.Blackhole(false)

	b, err := lb.Acquire(ctx, "lock:quota:1", instrument.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The moment B holds the lock, A's context must already be done.
	if a.Context().Err() == nil {
		t.Fatal("B acquired while A's lease context was still live: two holders")
	}
	if !errors.Is(context.Cause(a.Context()), instrument.ErrLockLost) {
		t.Fatalf("A's cause = %v, want ErrLockLost", context.Cause(a.Context()))
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("fence B %d <= fence A %d", b.Fence(), a.Fence())
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(false)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.Release(rctx); err == nil {
		t.Fatal("A's Release after the loss returned nil")
	}
}

// TestServerKilled_LossWithinTTLAndAcquireFailsFast kills redis-server under
// a held lock.
func TestServerKilled_LossWithinTTLAndAcquireFailsFast(t *testing.T) {
	t.Parallel()
	r, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 20*time.Second)
	const ttl = 2 * time.Second

	lease, err := l.Acquire(ctx, "lock:k", instrument.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Context().Done():
	case <-time.After(2 * ttl):
		t.Fatal("lease context still live twice the TTL after redis-server died")
	}
	if lostAfter := time.Since(start); lostAfter > ttl {
		t.Errorf("loss noticed %v after the kill, later than the TTL %v", lostAfter, ttl)
	}
	if !errors.Is(context.Cause(lease.Context()), instrument.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", context.Cause(lease.Context()))
	}

	actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = l.Acquire(actx, "lock:other")
	if err == nil {
		t.Fatal("Acquire succeeded against a dead server")
	}
	if actx.Err() != nil {
		t.Fatalf("Acquire returned only at the ctx deadline: %v", err)
	}
	if errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("a connection failure reported as ErrNotAcquired: %v", err)
	}
	if !strings.Contains(err.Error(), "lock:other") {
		t.Errorf("error %q does not name the key", err)
	}
	_ = lease.Release(actx)
}

// TestWait_WokenByReleaseNotification: the waiter's poll interval (1 min) and
// the holder's TTL (1 min) are both beyond the waiter's 20 s deadline, so
// only the release notification can let it acquire in time.
func TestWait_WokenByReleaseNotification(t *testing.T) {
	t.Parallel()
	r, c := setup(t)
	l := newLocker(t, c)
	other := newLocker(t, newClient(t, r.Addr())) // another process, in effect
	ctx := timeout(t, 30*time.Second)

	holder, err := other.Acquire(ctx, "lock:n", instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var once sync.Once
		cfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(time.Minute), instrument.WithPollInterval(time.Minute))
		cfg.Observer = instrument.ObserverFuncs{OnWaiting: func(w bool) {
			if w {
				once.Do(func() { close(waiting) })
			}
		}}
		lease, err := l.Acquire(wctx, "lock:n", instrument.WithConfig(cfg))
		if err == nil {
			err = lease.Release(wctx)
		}
		done <- err
	}()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("waiter returned before waiting: %v", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v (the release notification did not wake it)", err)
	}
}

// TestNoGoroutineSurvivesReleaseOrLoss checks the watchdog and timers of a
// lease are gone once it ends either way.
func TestNoGoroutineSurvivesReleaseOrLoss(t *testing.T) {
	_, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 10*time.Second)
	c.Ping(ctx) // open the pool before the snapshot
	opt := goleak.IgnoreCurrent()

	withRenewals, renewed := renewedSignal(300 * time.Millisecond)
	lease, err := l.Acquire(ctx, "lock:g", withRenewals)
	if err != nil {
		t.Fatal(err)
	}
	select { // the watchdog has run at least once
	case <-renewed:
	case <-ctx.Done():
		t.Fatal("the watchdog never renewed")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, opt)

	lost, err := l.Acquire(ctx, "lock:g", instrument.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, "lock:g") // someone deletes it: the next renewal proves the loss
	<-lost.Context().Done()
	goleak.VerifyNone(t, opt)
}

// TestLeakedLease_IsReleased drops a held lease: the cleanup releases it.
func TestLeakedLease_IsReleased(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 10*time.Second)
	var leaked atomic.Int32
	cfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(time.Minute))
	cfg.Observer = instrument.ObserverFuncs{OnLeaked: func() { leaked.Add(1) }}
	func() {
		if _, err := l.Acquire(ctx, "lock:leak", instrument.WithConfig(cfg)); err != nil {
			t.Fatal(err)
		}
	}()
	for c.Exists(ctx, "lock:leak").Val() == 1 {
		if ctx.Err() != nil {
			t.Fatal("dropped lease never released")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if leaked.Load() != 1 {
		t.Fatalf("Leaked hook ran %d times, want 1", leaked.Load())
	}
}

// TestBadInput_ClearErrorNothingWritten covers every refusal that must
// happen before a round trip.
func TestBadInput_ClearErrorNothingWritten(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 10*time.Second)
	cases := []struct {
		name, key string
		opts      []instrument.AcquireOption
		want      error
		mention   string
	}{
		{"empty key", "", nil, instrument.ErrInvalidKey, "empty"},
		{"key over 512 bytes", strings.Repeat("k", 513), nil, instrument.ErrInvalidKey, "513 bytes"},
		{"control character", "lock:\nx", nil, instrument.ErrInvalidKey, "control character"},
		{"DEL character", "lock:\x7fx", nil, instrument.ErrInvalidKey, "control character"},
		{"invalid UTF-8", "lock:\xffx", nil, instrument.ErrInvalidKey, "UTF-8"},
		{"braces without hash tag", "lock:a}b", nil, instrument.ErrInvalidKey, "hash tag"},
		{"zero TTL", "k", []instrument.AcquireOption{instrument.WithTTL(0)}, instrument.ErrInvalidOption, "TTL"},
		{"negative TTL", "k", []instrument.AcquireOption{instrument.WithTTL(-time.Second)}, instrument.ErrInvalidOption, "TTL"},
		{"retry without attempts", "k", []instrument.AcquireOption{instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 0)}, instrument.ErrInvalidOption, "maxAttempts"},
		{"retry nil backoff", "k", []instrument.AcquireOption{instrument.Retry(nil, 3)}, instrument.ErrInvalidOption, "backoff"},
		{"bad backoff", "k", []instrument.AcquireOption{instrument.Retry(instrument.ExponentialBackoff(time.Second, time.Millisecond), 3)}, instrument.ErrInvalidOption, "min <= max"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Acquire(ctx, tc.key, tc.opts...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("error %q does not say %q", err, tc.mention)
			}
			if n := c.DBSize(ctx).Val(); n != 0 {
				t.Fatalf("%d keys written by a refused call", n)
			}
		})
	}
	if _, err := redislock.New(nil); !errors.Is(err, instrument.ErrInvalidOption) || !strings.Contains(err.Error(), "nil client") {
		t.Fatalf("New(nil) = %v", err)
	}
	if _, err := redislock.New(c, redislock.WithFenceRetention(0)); !errors.Is(err, instrument.ErrInvalidOption) {
		t.Fatalf("New with zero retention = %v", err)
	}
}

// TestStrategies covers fail-fast and bounded retry against a held lock.
func TestStrategies_GiveUpWithErrNotAcquired(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 10*time.Second)
	holder, err := l.Acquire(ctx, "lock:s", instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	attempts := 0
	cfg, _ := instrument.ApplyAcquireOptions(instrument.Retry(instrument.ExponentialBackoff(time.Millisecond, 4*time.Millisecond), 4))
	cfg.Observer = instrument.ObserverFuncs{OnAttempt: func(bool) { attempts++ }}
	if _, err := l.Acquire(ctx, "lock:s", instrument.WithConfig(cfg)); !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("retry: %v, want ErrNotAcquired", err)
	}
	if attempts != 4 {
		t.Fatalf("retry made %d attempts, want 4", attempts)
	}
	if _, err := l.Acquire(ctx, "lock:s", instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("fail fast: %v, want ErrNotAcquired", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(short, "lock:s")
	if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait until deadline: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
}

// TestLockValue_CarriesReadableMetadata: the agent reads who holds a lock.
func TestLockValue_CarriesReadableMetadata(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c, redislock.WithService("payments"), redislock.WithInstance("pod-3"))
	ctx := timeout(t, 10*time.Second)
	cfg, _ := instrument.ApplyAcquireOptions(instrument.WithMeta(map[string]string{"order": "o-1"}))
	cfg.TraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	lease, err := l.Acquire(ctx, "lock:meta", instrument.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	v := c.Get(ctx, "lock:meta").Val()
	for _, want := range []string{`"service":"payments"`, `"instance":"pod-3"`, `"pid":`, `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"`,
		`"labels":{"order":"o-1"}`, fmt.Sprintf(`"fence":%d`, lease.Fence()), `"acquired_at_ms":`} {
		if !strings.Contains(v, want) {
			t.Errorf("lock value %q lacks %s", v, want)
		}
	}
}

var _ redis.UniversalClient = (*redis.Client)(nil)

// TestFastPath_OneRoundTripEach: an uncontended acquire is one command and a
// release is one command (EVALSHA; EVAL only the first time a script meets
// a server), the same as a hand-written SET NX PX + EVALSHA pair.
func TestFastPath_OneRoundTripEach(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	var commands int
	c.AddHook(countHook{&commands})
	l := newLocker(t, c)
	ctx := timeout(t, 5*time.Second)
	warmUp(t, ctx, l, instrument.FailFast())
	commands = 0
	lease, err := l.Acquire(ctx, "lock:fast", instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	if commands != 1 {
		t.Fatalf("acquire sent %d commands, want 1", commands)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if commands != 2 {
		t.Fatalf("acquire+release sent %d commands, want 2", commands)
	}
}

// TestMaxHold_WatchdogStopsAndLeaseExpires: the watchdog renews a lease
// until max hold (2.1 s), then lets it expire; the context says why.
func TestMaxHold_WatchdogStopsAndLeaseExpires(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c)
	ctx := timeout(t, 10*time.Second)
	var renewals atomic.Int32
	// A TTL of 1.5 s leaves the watchdog's first renewal (due at 500 ms)
	// about 950 ms of scheduling delay before the lease would end by expiry
	// instead: a loaded 2-core CI machine under -race has stalled a process
	// for 200 ms, and this test runs beside the package's other parallel
	// tests (900 ms, a 580 ms margin, before they did).
	const ttl = 1500 * time.Millisecond
	cfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(ttl), instrument.WithMaxHold(2100*time.Millisecond))
	cfg.Observer = instrument.ObserverFuncs{OnRenewed: func(err error) {
		if err == nil {
			renewals.Add(1)
		}
	}}
	start := time.Now()
	lease, err := l.Acquire(ctx, "lock:maxhold", instrument.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	<-lease.Context().Done()
	held := time.Since(start)
	cause := context.Cause(lease.Context())
	if !errors.Is(cause, instrument.ErrLockLost) || !strings.Contains(cause.Error(), "max hold") {
		t.Fatalf("cause = %v, want ErrLockLost naming max hold", cause)
	}
	if renewals.Load() == 0 {
		t.Fatal("the watchdog never renewed before max hold")
	}
	if held < ttl {
		t.Fatalf("lease ended after %v, before even one TTL", held)
	}
	// The context ends a drift margin before Redis expires the key, so the
	// Release may still find it (and delete it) or find it gone.
	if err := lease.Release(ctx); err != nil && !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("Release after max hold = %v", err)
	}
	if c.Exists(ctx, "lock:maxhold").Val() != 0 {
		t.Fatal("the lock outlived max hold plus Release")
	}
}
