package snowflake

import (
	"sync/atomic"
	"time"
)

// steppingClock is the system clock plus an offset that tests step at will: the wall clock
// jumps, the monotonic clock does not.
type steppingClock struct{ off atomic.Int64 }

func (c *steppingClock) Wall() time.Time      { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *steppingClock) Mono() time.Duration  { return time.Since(monoBase) }
func (c *steppingClock) Step(d time.Duration) { c.off.Add(int64(d)) }

// virtualClock runs speed times faster than real time and also advances by tick on every
// read, so property tests cover seconds of clock behaviour in milliseconds; Step moves only
// the wall clock.
type virtualClock struct {
	start       time.Time
	base        time.Time
	speed, tick int64
	reads, off  atomic.Int64
}

func newVirtualClock(speed int64, tick time.Duration) *virtualClock {
	return &virtualClock{start: time.Now(), base: time.Now().Add(-time.Hour).Round(0), speed: speed, tick: int64(tick)}
}

func (c *virtualClock) Mono() time.Duration {
	return time.Duration(int64(time.Since(c.start))*c.speed + c.reads.Add(1)*c.tick)
}
func (c *virtualClock) Wall() time.Time      { return c.base.Add(c.Mono() + time.Duration(c.off.Load())) }
func (c *virtualClock) Step(d time.Duration) { c.off.Add(int64(d)) }

// fakeLease is a WorkerLease whose state tests set directly.
type fakeLease struct {
	id    int64
	state atomic.Pointer[LeaseState]
	last  func() time.Time
}

func (l *fakeLease) WorkerID() int64                  { return l.id }
func (l *fakeLease) State() LeaseState                { return *l.state.Load() }
func (l *fakeLease) TrackLastUsed(f func() time.Time) { l.last = f }
func (l *fakeLease) set(s LeaseState)                 { l.state.Store(&s) }
