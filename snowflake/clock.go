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
	// yieldEvery spin iterations (a clock read each, tens of ns) the spinner yields the
	// processor. Not on every iteration: runtime.Gosched puts the goroutine on the global run
	// queue and wakes an idle P's thread to look for work, so a spinner yielding on every
	// iteration keeps the other core's thread waking up and the goroutine moving between
	// threads, which costs most when the machine is busy.
	yieldEvery = 64
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
// the epoch), or returns ctx's error; but only one caller at a time spins on the clock.
//
// At the layout's limit every goroutine using the generator runs out of a millisecond's
// sequence at the same moment. Letting each of them spin for the next millisecond puts N
// spinners on the CPUs while nothing can be issued anyway (bwmarrin/snowflake's mutex lets
// one spin while the others sleep; issue 12 once measured two goroutines at the 41/10/12
// limit at 0.81x its rate). So the first caller to arrive sets g.spinning and spins alone;
// the others park on g.wake until the spinner is done and wakes them, and then retry from
// the start. Nothing is handed over: a woken caller holds nothing, so one that the OS is slow
// to run never holds up the spinner, which may well issue the next millisecond's IDs and spin
// again before they run. Parked callers honour their contexts. (Same-run measurements on a
// shared 2-core machine showed no throughput change either way: docs/BENCHMARKS.md.)
func (g *Generator) waitTurn(ctx context.Context, target int64) error {
	if g.spinning.CompareAndSwap(false, true) {
		err := g.waitUntil(ctx, target)
		g.spinning.Store(false)
		// Wake every caller counted as parked. A counted caller may leave without taking its
		// wake-up (it saw the spinner finish, or its context ended), so wake-ups can be left in
		// the buffer; they only make a later caller retry once more. A send is dropped only
		// when the buffer is full, and then every parked caller has one to take.
		for n := g.parked.Load(); n > 0; n-- {
			select {
			case g.wake <- struct{}{}:
			default:
				return err
			}
		}
		return err
	}
	if g.parked.Add(1) > int32(cap(g.wake)) {
		// Never more parked callers than the buffer holds, so that a full buffer always has a
		// wake-up for each of them; the rest spin as the first does.
		g.parked.Add(-1)
		return g.waitUntil(ctx, target)
	}
	defer g.parked.Add(-1)
	// Counted before this check, so a spinner that finishes after it sees the count and wakes us.
	if !g.spinning.Load() {
		return nil
	}
	select {
	case <-g.wake:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// waitUntil returns once the generator's clock reads at least target (ns since the epoch),
// or with ctx's error.
func (g *Generator) waitUntil(ctx context.Context, target int64) error {
	for i := 1; ; i++ {
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
		if i%yieldEvery == 0 {
			runtime.Gosched()
		}
	}
}
