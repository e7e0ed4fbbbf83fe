package snowflake

import (
	"context"
	"runtime"
	"time"
)

// Clock is the time source a Generator reads. The default reads the system clock.
type Clock interface {
	// Wall returns the wall-clock time. It may step backwards or forwards (NTP, operators).
	Wall() time.Time
	// Mono returns the time elapsed since any fixed point. It must never go backwards.
	Mono() time.Duration
}

// monoBase anchors monotonic readings. Written once at init; time.Since(monoBase) is a
// single monotonic clock read, about half the cost of time.Now, which reads two clocks.
var monoBase = time.Now()

// SystemClock reads time.Now for the wall clock and the runtime's monotonic clock.
type SystemClock struct{}

// Wall returns time.Now().
func (SystemClock) Wall() time.Time { return time.Now() }

// Mono returns the monotonic time since the process loaded this package.
func (SystemClock) Mono() time.Duration { return time.Since(monoBase) }

// Waits shorter than spinBelow spin (yielding the processor) instead of sleeping: timers on
// common VMs wake up to a millisecond late, which would cost a quarter of a 41/10/12
// generator's throughput on every exhausted millisecond.
const (
	spinBelow  = 2 * time.Millisecond
	sleepSlack = 1500 * time.Microsecond
)

func sleepCtx(ctx context.Context, d time.Duration) error {
	if ctx.Done() == nil {
		time.Sleep(d)
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// waitUntil returns once the generator's clock reads at least target (ns since the epoch),
// or with ctx's error. It holds no lock: the generator has none.
func (g *Generator) waitUntil(ctx context.Context, target int64) error {
	for {
		d := time.Duration(target - (g.mono() + g.offset.Load()))
		if d <= 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		if d >= spinBelow {
			if err := sleepCtx(ctx, d-sleepSlack); err != nil {
				return err
			}
			continue
		}
		runtime.Gosched()
	}
}
