package instrument

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockgov/lockgov/policy"
)

// DefaultTTL is the lease TTL when neither the caller nor the policy sets one.
// It matches the spec's SET NX PX 30000; the watchdog renews at TTL/3.
const DefaultTTL = 30 * time.Second

// DefaultPollInterval bounds how long a waiter sleeps between attempts when
// no release notification arrives (a lock that expired instead of being
// released publishes nothing). Backends also wake when the holder's remaining
// TTL runs out, whichever comes first.
const DefaultPollInterval = time.Second

// WaitStrategy says what Acquire does when the lock is held by someone
// else. It is policy's type, so a policy file and an AcquireOption name the
// same strategies.
type WaitStrategy = policy.WaitStrategy

// The wait strategies.
const (
	// WaitDeadline waits, woken by release notifications, until ctx is done.
	WaitDeadline = policy.WaitDeadline
	// WaitFailFast makes exactly one attempt.
	WaitFailFast = policy.WaitFailFast
	// WaitRetry makes up to MaxAttempts attempts separated by Backoff delays.
	WaitRetry = policy.WaitRetry
)

// Backoff computes the delay before the next attempt; attempt is the number
// of attempts already made (1 after the first failure).
type Backoff interface {
	Delay(attempt int) time.Duration
	validate() error
}

// ConstantBackoff waits d between attempts.
func ConstantBackoff(d time.Duration) Backoff { return constantBackoff(d) }

type constantBackoff time.Duration

func (b constantBackoff) Delay(int) time.Duration { return time.Duration(b) }

func (b constantBackoff) validate() error {
	if b <= 0 {
		return fmt.Errorf("%w: constant backoff %v must be > 0", ErrInvalidOption, time.Duration(b))
	}
	return nil
}

// ExponentialBackoff doubles the delay from min up to max, with "equal
// jitter": the delay is uniformly drawn from [d/2, d] so that waiters that
// failed together do not retry together.
func ExponentialBackoff(min, max time.Duration) Backoff { return expBackoff{min: min, max: max} }

type expBackoff struct{ min, max time.Duration }

func (b expBackoff) Delay(attempt int) time.Duration {
	d := b.min
	for i := 1; i < attempt && d < b.max; i++ {
		d *= 2
	}
	if d > b.max {
		d = b.max
	}
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(d-half+1)
}

func (b expBackoff) validate() error {
	if b.min <= 0 || b.max < b.min {
		return fmt.Errorf("%w: exponential backoff needs 0 < min <= max, got min=%v max=%v", ErrInvalidOption, b.min, b.max)
	}
	return nil
}

// Observer is for backend authors: it is told what a backend does with one
// acquire call and the lease it produced; Govern's observer turns it into
// metrics, log lines and span events. Backends call every method (AcquireConfig.Observer is never nil
// after ApplyAcquireOptions); methods must be fast and must not block.
type Observer interface {
	// Attempt follows each acquire attempt that reached the backend.
	Attempt(acquired bool)
	// Waiting is called with true when the caller starts waiting for
	// another holder, and with false when it stops.
	Waiting(waiting bool)
	// Renewed follows each watchdog or manual refresh: nil on success, an
	// error wrapping ErrNotHeld when ownership was proven gone, the
	// transport error otherwise.
	Renewed(err error)
	// Lost is called once when the lease ends without Release.
	Lost(cause error)
	// Leaked is called once when a lease handle is garbage-collected while
	// still held; the backend then releases it.
	Leaked()
}

// ObserverFuncs is for backend authors: an Observer made of optional
// functions, for backends' tests and small adapters.
type ObserverFuncs struct {
	OnAttempt func(acquired bool)
	OnWaiting func(waiting bool)
	OnRenewed func(err error)
	OnLost    func(cause error)
	OnLeaked  func()
}

// Attempt calls OnAttempt if set.
func (f ObserverFuncs) Attempt(acquired bool) {
	if f.OnAttempt != nil {
		f.OnAttempt(acquired)
	}
}

// Waiting calls OnWaiting if set.
func (f ObserverFuncs) Waiting(waiting bool) {
	if f.OnWaiting != nil {
		f.OnWaiting(waiting)
	}
}

// Renewed calls OnRenewed if set.
func (f ObserverFuncs) Renewed(err error) {
	if f.OnRenewed != nil {
		f.OnRenewed(err)
	}
}

// Lost calls OnLost if set.
func (f ObserverFuncs) Lost(cause error) {
	if f.OnLost != nil {
		f.OnLost(cause)
	}
}

// Leaked calls OnLeaked if set.
func (f ObserverFuncs) Leaked() {
	if f.OnLeaked != nil {
		f.OnLeaked()
	}
}

// nopObserver is the Observer of an ungoverned call; zero-sized, so storing
// it in the interface does not allocate.
type nopObserver struct{}

func (nopObserver) Attempt(bool)  {}
func (nopObserver) Waiting(bool)  {}
func (nopObserver) Renewed(error) {}
func (nopObserver) Lost(error)    {}
func (nopObserver) Leaked()       {}

// AcquireConfig is for backend authors: the resolved form of a list of
// AcquireOptions. Backends obtain it with ApplyAcquireOptions; Govern builds
// it from the policy.
type AcquireConfig struct {
	TTL          time.Duration // lease TTL; the watchdog renews at TTL/3
	Wait         WaitStrategy
	Backoff      Backoff // between attempts in WaitRetry
	MaxAttempts  int     // WaitRetry only; >= 1
	PollInterval time.Duration
	MaxHold      time.Duration // 0: the watchdog renews until Release
	NoWatchdog   bool          // the caller refreshes by hand
	// TraceID and Meta travel into the lock value so that an operator (and
	// the agent) can tell who holds a lock and why. Never put secrets here.
	TraceID string
	Meta    map[string]string
	// Observer is told about attempts, waiting, renewals, loss and leaks.
	Observer Observer
}

// AcquireOption configures one Acquire call.
type AcquireOption interface {
	apply(*AcquireConfig)
}

type optionFunc func(*AcquireConfig)

func (f optionFunc) apply(c *AcquireConfig) { f(c) }

// WithTTL sets the lease TTL. The watchdog renews the lease every TTL/3.
func WithTTL(d time.Duration) AcquireOption {
	return optionFunc(func(c *AcquireConfig) { c.TTL = d })
}

// FailFast makes one attempt and returns ErrNotAcquired if the lock is held.
func FailFast() AcquireOption {
	return optionFunc(func(c *AcquireConfig) { c.Wait = WaitFailFast })
}

// Retry makes up to maxAttempts attempts, sleeping b.Delay between them, and
// returns ErrNotAcquired when they are used up (or ctx's error if it ends
// first).
func Retry(b Backoff, maxAttempts int) AcquireOption {
	return optionFunc(func(c *AcquireConfig) {
		c.Wait = WaitRetry
		c.Backoff = b
		c.MaxAttempts = maxAttempts
	})
}

// WaitUntilDeadline waits until ctx is done, woken by release notifications.
// It is the default.
func WaitUntilDeadline() AcquireOption {
	return optionFunc(func(c *AcquireConfig) { c.Wait = WaitDeadline })
}

// WithPollInterval bounds the sleep between attempts while waiting for a
// release notification (default DefaultPollInterval).
func WithPollInterval(d time.Duration) AcquireOption {
	return optionFunc(func(c *AcquireConfig) { c.PollInterval = d })
}

// WithMaxHold stops the watchdog once the lease has been held for d: the
// lease then expires at its TTL and its context ends with ErrLockLost.
func WithMaxHold(d time.Duration) AcquireOption {
	return optionFunc(func(c *AcquireConfig) { c.MaxHold = d })
}

// WithoutWatchdog disables automatic renewal: the lease expires after its TTL
// unless the caller calls Refresh. Its context still ends at the expiry.
func WithoutWatchdog() AcquireOption {
	return optionFunc(func(c *AcquireConfig) { c.NoWatchdog = true })
}

// WithMeta adds business labels to the lock value (not to metrics). Keys and
// values are visible to anyone who can read the lock store.
func WithMeta(kv map[string]string) AcquireOption {
	return optionFunc(func(c *AcquireConfig) {
		if c.Meta == nil {
			c.Meta = make(map[string]string, len(kv))
		}
		for k, v := range kv {
			c.Meta[k] = v
		}
	})
}

// WithConfig is for backend authors and governing layers: it replaces the
// whole configuration (options after it still apply), to hand a resolved
// configuration to a backend.
func WithConfig(cfg AcquireConfig) AcquireOption {
	return optionFunc(func(c *AcquireConfig) { *c = cfg })
}

// ApplyAcquireOptions is for backend authors: it resolves opts over the
// defaults (TTL DefaultTTL, WaitDeadline, poll DefaultPollInterval, a no-op
// Observer) and validates the result.
func ApplyAcquireOptions(opts ...AcquireOption) (AcquireConfig, error) {
	c := AcquireConfig{TTL: DefaultTTL, PollInterval: DefaultPollInterval}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	return c, c.Validate()
}

// Validate is for backend authors: it reports the first value that cannot
// work.
func (c *AcquireConfig) Validate() error {
	if c.TTL <= 0 {
		return fmt.Errorf("%w: TTL %v must be > 0", ErrInvalidOption, c.TTL)
	}
	if c.TTL < 3*time.Millisecond {
		return fmt.Errorf("%w: TTL %v is below the 3ms a watchdog at TTL/3 needs", ErrInvalidOption, c.TTL)
	}
	if c.PollInterval < 0 {
		return fmt.Errorf("%w: poll interval %v must be > 0", ErrInvalidOption, c.PollInterval)
	}
	if c.MaxHold < 0 {
		return fmt.Errorf("%w: max hold %v must be >= 0", ErrInvalidOption, c.MaxHold)
	}
	switch c.Wait {
	case WaitDeadline, WaitFailFast:
	case WaitRetry:
		if c.MaxAttempts < 1 {
			return fmt.Errorf("%w: retry needs maxAttempts >= 1, got %d", ErrInvalidOption, c.MaxAttempts)
		}
		if c.Backoff == nil {
			return fmt.Errorf("%w: retry needs a backoff, got nil", ErrInvalidOption)
		}
		if err := c.Backoff.validate(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: unknown wait strategy %d", ErrInvalidOption, c.Wait)
	}
	return nil
}
