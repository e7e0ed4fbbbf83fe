package snowflake

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalid is wrapped by every configuration and argument error: a bad layout, a worker
	// ID out of range, an epoch in the future, a batch of n <= 0.
	ErrInvalid = errors.New("snowflake: invalid argument")

	// ErrClockBackwards matches a *ClockBackwardsError with errors.Is.
	ErrClockBackwards = errors.New("snowflake: clock moved backwards")

	// ErrWorkerLeaseLost: the generator is bound to a WorkerID lease that is lost, or could
	// have expired by now; it issues nothing until the lease is confirmed again.
	ErrWorkerLeaseLost = errors.New("snowflake: worker lease lost")

	// ErrLifetimeOver: the layout's time bits are used up for this epoch.
	ErrLifetimeOver = errors.New("snowflake: layout lifetime is over")
)

// ClockBackwardsError is returned when the clock is behind the last millisecond the
// generator used (or behind a lease's high-water mark) by more than the generator's MaxWait.
type ClockBackwardsError struct {
	// Offset is how far the clock is behind the millisecond the generator must issue in next.
	Offset time.Duration
}

func (e *ClockBackwardsError) Error() string {
	return fmt.Sprintf("snowflake: clock moved backwards by %s, more than the generator waits; refusing to issue IDs", e.Offset)
}

// Is makes errors.Is(err, ErrClockBackwards) true.
func (e *ClockBackwardsError) Is(target error) bool { return target == ErrClockBackwards }
