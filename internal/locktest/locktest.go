// Package locktest is the conformance suite every lockgov lock backend
// runs: mutual exclusion with fences, ownership on release and refresh, loss
// notification, each wait strategy, bad input, reentrancy through
// instrument.Govern and goroutine leaks.
//
// A backend's test calls Run with a constructor of fresh Lockers on one
// shared store (each call should dial its own client, so that two Lockers
// really are two processes' worth of state):
//
//	locktest.Run(t, func(t *testing.T) instrument.Locker { return newLocker(t) },
//		locktest.WithLoser(func(t *testing.T, key string) { deleteLockKey(t, key) }))
//
// The suite runs its cases sequentially (they share the store) on keys of
// their own, so a failure in one does not cascade into the next.
package locktest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/leakcheck"
)

// Option configures Run.
type Option func(*config)

type config struct {
	loser       func(t *testing.T, key string)
	expiryTTL   time.Duration
	goroutines  int
	iterations  int
	leakOptions []goleak.Option
	noFences    bool
	noExpiry    bool
	waitOpts    []instrument.AcquireOption
	noRefresh   bool
	keyPrefix   string
	governOpts  []instrument.Option
}

// WithLoser gives the suite a way to take a held lock away behind its
// holder's back: delete the lock key in the store, or end the session that
// holds it. Without it the deletion cases are skipped (expiry cases still
// run).
func WithLoser(f func(t *testing.T, key string)) Option {
	return func(c *config) { c.loser = f }
}

// WithExpiryTTL sets the TTL of the cases that let a lease expire (default
// 500ms). Backends whose TTL has a coarse granularity (etcd: whole seconds)
// pass what they honour.
func WithExpiryTTL(d time.Duration) Option {
	return func(c *config) { c.expiryTTL = d }
}

// WithContention sets the goroutines per Locker and the iterations per
// goroutine of the mutual exclusion case (default 4 and 25, on two Lockers).
func WithContention(goroutines, iterations int) Option {
	return func(c *config) { c.goroutines, c.iterations = goroutines, iterations }
}

// WithoutFenceOrder skips the checks that fences strictly increase across
// holders, for a backend that documents weaker fences (for example a quorum
// of independent Redis nodes). Mutual exclusion is still checked.
func WithoutFenceOrder() Option {
	return func(c *config) { c.noFences = true }
}

// WithoutExpiry is for a Locker whose leases the suite cannot make expire:
// WithTTL and WithoutWatchdog have no effect on them (etcdlock.FromMutex,
// whose session keepalive renews every Mutex key of the session while the
// process lives). ExpiryCancelsContextWithLockLost is skipped; the cases
// that need a lost lease (ownership, no goroutine after a loss) take the
// lock away with WithLoser instead of letting it expire, and skip that part
// without a loser.
func WithoutExpiry() Option {
	return func(c *config) { c.noExpiry = true }
}

// WithWaitOptions gives the options the suite adds to every Acquire that
// must wait for another holder to release (mutual exclusion, the shared
// Locker, the waiter, the new holder after an expiry, and the wait past a
// deadline, where they replace WaitUntilDeadline), for a Locker that cannot
// wait by itself: FromFunc around a one-shot lock calls it once for
// WaitUntilDeadline, so its suite passes Retry. The other cases keep the
// Locker's default wait.
func WithWaitOptions(opts ...instrument.AcquireOption) Option {
	return func(c *config) { c.waitOpts = append(c.waitOpts, opts...) }
}

// WithoutRefresh is for a Locker whose leases cannot be refreshed (FromFunc:
// the wrapped code does not renew). The ownership case then checks that
// Refresh returns errors.ErrUnsupported, for the expired holder and the
// live one alike, instead of ErrNotHeld and a successful refresh.
func WithoutRefresh() Option {
	return func(c *config) { c.noRefresh = true }
}

// WithKeyPrefix sets the prefix of every key the suite locks (default
// "locktest:"), for a store that lets the Lockers under test touch only
// some keys (a Redis ACL user limited to "lock:*").
func WithKeyPrefix(p string) Option {
	return func(c *config) { c.keyPrefix = p }
}

// WithGovernOptions gives the options of the instrument.Govern the
// re-entrancy case wraps the Locker in (for example
// instrument.WithoutHeartbeat when the store's ACL does not let the
// Lockers write heartbeats).
func WithGovernOptions(opts ...instrument.Option) Option {
	return func(c *config) { c.governOpts = append(c.governOpts, opts...) }
}

// WithLeakOptions adds goleak options (for example IgnoreTopFunction of a
// client's long-lived goroutine) to the leak cases.
func WithLeakOptions(opts ...goleak.Option) Option {
	return func(c *config) { c.leakOptions = append(c.leakOptions, opts...) }
}

// Run runs the conformance suite as subtests of t. newLocker must return a
// new Locker on the store under test each time it is called.
func Run(t *testing.T, newLocker func(t *testing.T) instrument.Locker, opts ...Option) {
	c := config{expiryTTL: 500 * time.Millisecond, goroutines: 4, iterations: 25, keyPrefix: "locktest:"}
	for _, o := range opts {
		o(&c)
	}
	s := &suite{c: c, newLocker: newLocker}
	t.Run("MutualExclusionWithIncreasingFences", s.mutualExclusion)
	t.Run("SharedLockerExcludesItsOwnGoroutines", s.sharedLocker)
	t.Run("ReleaseAndRefreshByExpiredHolderAreNotHeld", s.ownership)
	t.Run("ReleaseTwiceIsNotHeld", s.releaseTwice)
	t.Run("ExpiryCancelsContextWithLockLost", s.expiry)
	t.Run("DeletionCancelsContextWithLockLost", s.deletion)
	t.Run("FailFastReturnsNotAcquired", s.failFast)
	t.Run("RetryMakesMaxAttempts", s.retry)
	t.Run("WaitUntilDeadlineReturnsNotAcquiredWithDeadline", s.waitDeadline)
	t.Run("WaiterAcquiresOnRelease", s.waitRelease)
	t.Run("BadInputIsRefused", s.badInput)
	t.Run("GovernReentersAndOuterReleaseFrees", s.reentrancy)
	t.Run("NoGoroutineSurvivesRelease", s.leakAfterRelease)
	t.Run("NoGoroutineSurvivesLoss", s.leakAfterLoss)
}

type suite struct {
	c         config
	newLocker func(t *testing.T) instrument.Locker
}

// wait returns opts followed by the Locker's wait options, for an Acquire
// that must wait for another holder.
func (s *suite) wait(opts ...instrument.AcquireOption) []instrument.AcquireOption {
	return append(opts, s.c.waitOpts...)
}

var keySeq atomic.Int64

// key returns a key no other case uses, under the suite's key prefix.
func (s *suite) key(t *testing.T) string {
	name := strings.NewReplacer("/", ":", " ", "_").Replace(t.Name())
	return s.c.keyPrefix + name + ":" + time.Now().Format("150405.000000") + ":" + itoa(keySeq.Add(1))
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, l instrument.Locker, ctx context.Context, key string, opts ...instrument.AcquireOption) instrument.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return lease
}

func mustRelease(t *testing.T, lease instrument.Lease) {
	t.Helper()
	if err := lease.Release(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatalf("Release(%q): %v", lease.Key(), err)
	}
}

// waitDone waits for the lease context to end and returns its cause.
func waitDone(t *testing.T, lease instrument.Lease, within time.Duration) error {
	t.Helper()
	select {
	case <-lease.Context().Done():
		return context.Cause(lease.Context())
	case <-time.After(within):
		t.Fatalf("lease on %q still live after %v", lease.Key(), within)
		return nil
	}
}

// assertHeldByOther checks that a third party cannot take key right now.
func (s *suite) assertHeldByOther(t *testing.T, l instrument.Locker, key string) {
	t.Helper()
	lease, err := l.Acquire(ctxFor(t, 5*time.Second), key, instrument.FailFast())
	if err == nil {
		_ = lease.Release(ctxFor(t, 5*time.Second))
		t.Fatalf("FailFast Acquire(%q) succeeded while another lease should hold it", key)
	}
	if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("FailFast Acquire(%q) while held: %v, want ErrNotAcquired", key, err)
	}
}

// mutualExclusion: goroutines on two Lockers increment a counter with a
// separate load and store (a lost update shows any overlap), and each holder
// sees a fence larger than every earlier holder's.
func (s *suite) mutualExclusion(t *testing.T) {
	lockers := []instrument.Locker{s.newLocker(t), s.newLocker(t)}
	k := s.key(t)
	var (
		counter  atomic.Int64 // load and store separately: not an atomic increment
		holders  atomic.Int32
		last     atomic.Uint64
		failures atomic.Int32
		wg       sync.WaitGroup
	)
	for _, l := range lockers {
		for range s.c.goroutines {
			wg.Go(func() {
				for range s.c.iterations {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					lease, err := l.Acquire(ctx, k, s.wait(instrument.WithTTL(10*time.Second))...)
					cancel()
					if err != nil {
						t.Errorf("Acquire: %v", err)
						failures.Add(1)
						return
					}
					if n := holders.Add(1); n != 1 {
						t.Errorf("%d holders at once", n)
					}
					f := lease.Fence()
					if prev := last.Load(); f <= prev && !s.c.noFences {
						t.Errorf("fence %d after fence %d: not increasing", f, prev)
					}
					last.Store(f)
					v := counter.Load()
					time.Sleep(100 * time.Microsecond)
					counter.Store(v + 1)
					holders.Add(-1)
					if err := lease.Release(ctxFor(t, 5*time.Second)); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	want := int64(len(lockers) * s.c.goroutines * s.c.iterations)
	if failures.Load() == 0 && counter.Load() != want {
		t.Fatalf("counter = %d after %d locked increments: updates were lost", counter.Load(), want)
	}
}

// sharedLocker: goroutines acquiring one key through the same Locker never
// hold it together.
func (s *suite) sharedLocker(t *testing.T) {
	l := s.newLocker(t)
	k := s.key(t)
	var holders atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				lease, err := l.Acquire(ctxFor(t, 30*time.Second), k, s.wait()...)
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d goroutines of one Locker hold %q at once", n, k)
				}
				time.Sleep(time.Millisecond)
				holders.Add(-1)
				if err := lease.Release(ctxFor(t, 5*time.Second)); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
}

// ownership: A's lease expires (WithoutExpiry: is taken away) and B takes
// the key; A's Release and Refresh are ErrNotHeld and leave B's lock alone.
func (s *suite) ownership(t *testing.T) {
	if s.c.noExpiry && s.c.loser == nil {
		t.Skip("WithoutExpiry and no WithLoser: no way to end A's lease")
	}
	la, lb, lc := s.newLocker(t), s.newLocker(t), s.newLocker(t)
	k := s.key(t)
	a := mustAcquire(t, la, ctxFor(t, 5*time.Second), k, instrument.WithTTL(s.c.expiryTTL), instrument.WithoutWatchdog())
	if s.c.noExpiry {
		s.c.loser(t, k)
	}
	b := mustAcquire(t, lb, ctxFor(t, 10*s.c.expiryTTL+10*time.Second), k, s.wait(instrument.WithTTL(10*time.Second))...)
	defer mustRelease(t, b)
	if cause := waitDone(t, a, 5*time.Second); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("A's context cause after the loss: %v, want ErrLockLost", cause)
	}
	if b.Fence() <= a.Fence() && !s.c.noFences {
		t.Fatalf("B's fence %d is not above A's %d", b.Fence(), a.Fence())
	}
	if err := a.Release(ctxFor(t, 5*time.Second)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("A.Release after B took the lock: %v, want ErrNotHeld", err)
	}
	if s.c.noRefresh {
		for name, l := range map[string]instrument.Lease{"A": a, "B": b} {
			if err := l.Refresh(ctxFor(t, 5*time.Second)); !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("%s.Refresh: %v, want errors.ErrUnsupported", name, err)
			}
		}
		s.assertHeldByOther(t, lc, k)
	} else {
		if err := a.Refresh(ctxFor(t, 5*time.Second)); !errors.Is(err, instrument.ErrNotHeld) {
			t.Fatalf("A.Refresh after B took the lock: %v, want ErrNotHeld", err)
		}
		s.assertHeldByOther(t, lc, k)
		if err := b.Refresh(ctxFor(t, 5*time.Second)); err != nil {
			t.Fatalf("B.Refresh: %v", err)
		}
	}
	if err := b.Context().Err(); err != nil {
		t.Fatalf("B's context ended: %v", context.Cause(b.Context()))
	}
}

func (s *suite) releaseTwice(t *testing.T) {
	l := s.newLocker(t)
	lease := mustAcquire(t, l, ctxFor(t, 5*time.Second), s.key(t))
	mustRelease(t, lease)
	if cause := context.Cause(lease.Context()); !errors.Is(cause, instrument.ErrReleased) {
		t.Fatalf("context cause after Release: %v, want ErrReleased", cause)
	}
	if err := lease.Release(ctxFor(t, 5*time.Second)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
}

// expiry: a lease nobody refreshes ends with ErrLockLost, and the key is
// free again afterwards.
func (s *suite) expiry(t *testing.T) {
	if s.c.noExpiry {
		t.Skip("WithoutExpiry: the backend's leases do not expire by WithTTL")
	}
	l := s.newLocker(t)
	k := s.key(t)
	lease := mustAcquire(t, l, ctxFor(t, 5*time.Second), k, instrument.WithTTL(s.c.expiryTTL), instrument.WithoutWatchdog())
	if cause := waitDone(t, lease, 3*s.c.expiryTTL+5*time.Second); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("cause after expiry: %v, want ErrLockLost", cause)
	}
	next := mustAcquire(t, s.newLocker(t), ctxFor(t, 3*s.c.expiryTTL+5*time.Second), k, s.wait()...)
	mustRelease(t, next)
}

// deletion: a lock taken away in the store ends the holder's context.
func (s *suite) deletion(t *testing.T) {
	if s.c.loser == nil {
		t.Skip("backend gave no WithLoser")
	}
	l := s.newLocker(t)
	k := s.key(t)
	lease := mustAcquire(t, l, ctxFor(t, 5*time.Second), k, instrument.WithTTL(10*time.Second))
	s.c.loser(t, k)
	if cause := waitDone(t, lease, 8*time.Second); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("cause after deletion: %v, want ErrLockLost", cause)
	}
	if err := lease.Release(ctxFor(t, 5*time.Second)); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("Release after loss: %v, want ErrNotHeld", err)
	}
}

func (s *suite) failFast(t *testing.T) {
	l := s.newLocker(t)
	k := s.key(t)
	h := mustAcquire(t, l, ctxFor(t, 5*time.Second), k)
	defer mustRelease(t, h)
	start := time.Now()
	s.assertHeldByOther(t, s.newLocker(t), k)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("FailFast took %v", d)
	}
}

func (s *suite) retry(t *testing.T) {
	l := s.newLocker(t)
	k := s.key(t)
	h := mustAcquire(t, l, ctxFor(t, 5*time.Second), k)
	defer mustRelease(t, h)
	attempts := 0
	cfg, err := instrument.ApplyAcquireOptions(instrument.Retry(instrument.ConstantBackoff(20*time.Millisecond), 3))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = instrument.ObserverFuncs{OnAttempt: func(bool) { attempts++ }}
	_, err = s.newLocker(t).Acquire(ctxFor(t, 10*time.Second), k, instrument.WithConfig(cfg))
	if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("Retry(3) on a held key: %v, want ErrNotAcquired", err)
	}
	if attempts != 3 {
		t.Fatalf("Retry(3) made %d attempts", attempts)
	}
}

func (s *suite) waitDeadline(t *testing.T) {
	l := s.newLocker(t)
	k := s.key(t)
	h := mustAcquire(t, l, ctxFor(t, 5*time.Second), k)
	defer mustRelease(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	wait := []instrument.AcquireOption{instrument.WaitUntilDeadline()}
	if len(s.c.waitOpts) > 0 {
		wait = s.c.waitOpts
	}
	_, err := s.newLocker(t).Acquire(ctx, k, wait...)
	if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a held key past the deadline: %v, want ErrNotAcquired wrapping DeadlineExceeded", err)
	}
	// The waiter withdrew: the holder can still release and others acquire.
}

func (s *suite) waitRelease(t *testing.T) {
	l := s.newLocker(t)
	k := s.key(t)
	h := mustAcquire(t, l, ctxFor(t, 5*time.Second), k)
	got := make(chan error, 1)
	go func() {
		lease, err := s.newLocker(t).Acquire(ctxFor(t, 20*time.Second), k, s.wait()...)
		if err == nil {
			if lease.Fence() <= h.Fence() && !s.c.noFences {
				err = errors.New("waiter's fence is not above the holder's")
			}
			_ = lease.Release(ctxFor(t, 5*time.Second))
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	mustRelease(t, h)
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func (s *suite) badInput(t *testing.T) {
	l := s.newLocker(t)
	ctx := ctxFor(t, 5*time.Second)
	keys := map[string]string{
		"empty":         "",
		"513 bytes":     strings.Repeat("k", instrument.MaxKeyLen+1),
		"control char":  "lock:\nx",
		"DEL char":      "lock:\x7fx",
		"invalid UTF-8": "lock:\xff",
	}
	for name, k := range keys {
		if _, err := l.Acquire(ctx, k); !errors.Is(err, instrument.ErrInvalidKey) {
			t.Errorf("key %s: %v, want ErrInvalidKey", name, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second} {
		_, err := l.Acquire(ctx, s.key(t), instrument.WithTTL(ttl))
		if !errors.Is(err, instrument.ErrInvalidOption) || !strings.Contains(err.Error(), "TTL") {
			t.Errorf("TTL %v: %v, want ErrInvalidOption naming the TTL", ttl, err)
		}
	}
	if _, err := l.Acquire(ctx, s.key(t), instrument.Retry(nil, 3)); !errors.Is(err, instrument.ErrInvalidOption) {
		t.Errorf("Retry with nil backoff: %v, want ErrInvalidOption", err)
	}
}

func (s *suite) reentrancy(t *testing.T) {
	g, err := instrument.NewGoverned(s.newLocker(t), s.c.governOpts...)
	if err != nil {
		t.Fatal(err)
	}
	other := s.newLocker(t)
	k := s.key(t)
	outer := mustAcquire(t, g, ctxFor(t, 5*time.Second), k)
	ictx, cancel := context.WithTimeout(outer.Context(), 5*time.Second)
	defer cancel()
	inner, err := g.Acquire(ictx, k, instrument.FailFast())
	if err != nil {
		t.Fatalf("nested Acquire with the lease's context: %v (want re-entry)", err)
	}
	if inner.Fence() != outer.Fence() {
		t.Fatalf("re-entered fence %d, outer %d", inner.Fence(), outer.Fence())
	}
	mustRelease(t, inner)
	s.assertHeldByOther(t, other, k)
	if err := outer.Context().Err(); err != nil {
		t.Fatalf("inner Release ended the outer lease: %v", context.Cause(outer.Context()))
	}
	mustRelease(t, outer)
	free := mustAcquire(t, other, ctxFor(t, 5*time.Second), k, instrument.FailFast())
	mustRelease(t, free)
}

// warm makes a Locker start whatever long-lived goroutines its client
// keeps, so that the leak check sees only per-lease ones.
func (s *suite) warm(t *testing.T, l instrument.Locker) {
	lease := mustAcquire(t, l, ctxFor(t, 5*time.Second), s.key(t))
	mustRelease(t, lease)
}

func (s *suite) leakAfterRelease(t *testing.T) {
	l := s.newLocker(t)
	s.warm(t, l)
	base := append([]goleak.Option{goleak.IgnoreCurrent()}, s.c.leakOptions...)
	k := s.key(t)
	for range 3 {
		lease := mustAcquire(t, l, ctxFor(t, 5*time.Second), k, instrument.WithTTL(3*time.Second))
		mustRelease(t, lease)
	}
	verifyNoLeak(t, base)
}

// verifyNoLeak is goleak.VerifyNone with a longer grace period: clients
// close idle streams (etcd's watch stream, for one) asynchronously, which
// takes longer than goleak's own retries on a loaded two-core machine.
func verifyNoLeak(t *testing.T, opts []goleak.Option) {
	t.Helper()
	if err := leakcheck.Find(leakcheck.Grace, opts...); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) leakAfterLoss(t *testing.T) {
	l := s.newLocker(t)
	s.warm(t, l)
	base := append([]goleak.Option{goleak.IgnoreCurrent()}, s.c.leakOptions...)
	if !s.c.noExpiry {
		lease := mustAcquire(t, l, ctxFor(t, 5*time.Second), s.key(t), instrument.WithTTL(s.c.expiryTTL), instrument.WithoutWatchdog())
		if cause := waitDone(t, lease, 3*s.c.expiryTTL+5*time.Second); !errors.Is(cause, instrument.ErrLockLost) {
			t.Fatalf("cause: %v", cause)
		}
	}
	if s.c.loser != nil {
		k := s.key(t)
		lease := mustAcquire(t, l, ctxFor(t, 5*time.Second), k, instrument.WithTTL(10*time.Second))
		s.c.loser(t, k)
		if cause := waitDone(t, lease, 8*time.Second); !errors.Is(cause, instrument.ErrLockLost) {
			t.Fatalf("cause: %v", cause)
		}
	}
	verifyNoLeak(t, base)
}
