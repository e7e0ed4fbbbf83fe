package snowflake

import "time"

// DefaultMaxWait is how far back the clock may step before NextID refuses instead of waiting.
const DefaultMaxWait = 5 * time.Millisecond

// Option configures a Generator.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	layout  Layout
	epoch   time.Time
	clock   Clock
	maxWait time.Duration
	lease   WorkerLease
	hooks   Hooks
	skew    SkewSource
}

// Hooks are called by a Generator on events worth counting; nil hooks are skipped. They run
// on the calling goroutine and must be fast.
type Hooks struct {
	// ClockBackwards is called when the clock is behind the last millisecond used: refused
	// is false when the generator waits it out, true when it returns *ClockBackwardsError.
	ClockBackwards func(offset time.Duration, refused bool)
	// SequenceExhausted is called when a millisecond's sequence is used up and the caller
	// waits for the next millisecond.
	SequenceExhausted func()
}

// WithLayout sets the bit layout (default DefaultLayout, 41/10/12).
func WithLayout(l Layout) Option { return optionFunc(func(c *config) { c.layout = l }) }

// WithEpoch sets the epoch (default DefaultEpoch, 2024-01-01T00:00:00Z). It must not be in
// the future (see Layout.ValidateEpoch). Generators bound to leases on one key prefix must
// all use the same epoch (and layout): a lease's high-water mark is a Unix millisecond, an
// ID's time counts from the epoch. A *workerid.Lease binds only a generator of its
// Registry's epoch (workerid.WithEpoch): build both with the same one.
func WithEpoch(t time.Time) Option { return optionFunc(func(c *config) { c.epoch = t }) }

// WithClock replaces the system clock, for tests.
func WithClock(clk Clock) Option { return optionFunc(func(c *config) { c.clock = clk }) }

// WithMaxWait sets how far back the clock may step before NextID refuses (default 5ms).
// Zero refuses every backwards step.
func WithMaxWait(d time.Duration) Option { return optionFunc(func(c *config) { c.maxWait = d }) }

// WithLease binds the generator to a WorkerID lease: it issues nothing once the lease could
// have expired, and nothing at or below the lease's high-water mark. The lease's WorkerID
// must equal the generator's. A lease that can track the last-used time (as
// *workerid.Lease does) is given the generator's, so that Release persists it. A
// *workerid.Lease takes one generator: New refuses a second with ErrInvalid, since two
// generators on one lease would issue the same IDs. Share the first (it is safe for
// concurrent use; Segments are built on a Generator, so they share it too).
func WithLease(l WorkerLease) Option { return optionFunc(func(c *config) { c.lease = l }) }

// WithHooks installs event hooks, e.g. from idmetrics.Generator.SnowflakeHooks.
func WithHooks(h Hooks) Option { return optionFunc(func(c *config) { c.hooks = h }) }
