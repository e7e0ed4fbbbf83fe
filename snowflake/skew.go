package snowflake

import (
	"errors"
	"fmt"
	"time"
)

// ErrClockSkew matches a *ClockSkewError with errors.Is.
var ErrClockSkew = errors.New("snowflake: clock skew too large")

// ClockSkewError is returned while the generator's skew source puts this process in the
// reject tier: its wall clock is too far from the store's for its IDs' time bits to be
// trusted across the fleet.
type ClockSkewError struct {
	// Offset is the process's measured offset to the store (local minus store).
	Offset time.Duration
}

func (e *ClockSkewError) Error() string {
	return fmt.Sprintf("snowflake: clock is %s off the store's, in the reject tier; refusing to issue IDs", e.Offset)
}

// Is makes errors.Is(err, ErrClockSkew) true.
func (e *ClockSkewError) Is(target error) bool { return target == ErrClockSkew }

// SkewSource reports the process's clock offset to its store and whether the policy's skew
// tiers reject new IDs at that offset. It is called on every NextID and Fill and must be
// cheap (an atomic load).
type SkewSource func() (offset time.Duration, reject bool)

// skewReporter is implemented by WorkerID leases that know their process's skew tier (as
// *workerid.Lease does through its store's heartbeat): a generator bound to one with
// WithLease honours it unless WithSkewSource says otherwise.
type skewReporter interface {
	ClockSkew() (offset time.Duration, reject bool)
}

// WithSkewSource makes the generator refuse IDs with *ClockSkewError while f reports reject.
// Without it, a generator bound to a lease that reports its skew (workerid.Lease) uses the
// lease's.
func WithSkewSource(f SkewSource) Option { return optionFunc(func(c *config) { c.skew = f }) }

func (g *Generator) checkSkew() error {
	if g.skew == nil {
		return nil
	}
	if off, reject := g.skew(); reject {
		return &ClockSkewError{Offset: off}
	}
	return nil
}
