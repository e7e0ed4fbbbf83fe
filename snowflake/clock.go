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

// waitTurn waits, like waitUntil, until the generator's clock reads at least target (ns since
// the epoch), or returns ctx's error; but only one caller at a time waits for the clock.
//
// At the layout's limit every goroutine using the generator runs out of a millisecond's
// sequence at the same moment. Letting each of them spin for the next millisecond (each
// reading the clock and calling runtime.Gosched in a loop) puts N spinners on the CPUs and
// the scheduler while nothing can be issued anyway; issue 12 measured two goroutines at the
// 41/10/12 limit getting lockgov 69% of the limit against bwmarrin/snowflake's 94%, whose
// mutex lets one goroutine spin while the others sleep. So the first caller to arrive takes
// the token and spins alone; the others park on the token until it is handed on, by which
// time the clock has passed target, so each of them hands it on at once and retries. Issuing
// stays lock-free, and the token is a channel, so a parked caller honours its context.
func (g *Generator) waitTurn(ctx context.Context, target int64) error {
	select {
	case g.waiter <- struct{}{}:
	default:
		select {
		case g.waiter <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	defer func() { <-g.waiter }()
	return g.waitUntil(ctx, target)
}

// waitUntil returns once the generator's clock reads at least target (ns since the epoch),
// or with ctx's error.
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
