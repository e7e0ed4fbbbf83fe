package snowflake

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// steps are the clock steps the issue names: back 1ms, 4ms, 6ms and 1s, forward 10s.
var steps = []time.Duration{-time.Millisecond, -4 * time.Millisecond, -6 * time.Millisecond, -time.Second, 10 * time.Second}

// issue runs workers goroutines that each take perWorker IDs from g, applying step i of
// plan when worker plan[i].worker has issued plan[i].at IDs. It fails t on any error other
// than ErrClockBackwards, on a goroutine's IDs not strictly increasing, and on a duplicate.
func issue(t tb, g *Generator, clk interface{ Step(time.Duration) }, workers, perWorker int, plan []stepAt) (refused int64) {
	t.Helper()
	out := make([][]int64, workers)
	var wg sync.WaitGroup
	var refusals atomic.Int64
	var failed atomic.Value
	ctx := context.Background()
	for w := range workers {
		wg.Go(func() {
			var mine []stepAt // this worker's steps, each applied once
			for _, s := range plan {
				if s.worker == w {
					mine = append(mine, s)
				}
			}
			ids := make([]int64, 0, perWorker)
			var prev int64
			for len(ids) < perWorker {
				for i := range mine {
					if mine[i].at == len(ids) {
						clk.Step(mine[i].d)
						mine[i].at = -1
					}
				}
				id, err := g.NextID(ctx)
				if errors.Is(err, ErrClockBackwards) {
					refusals.Add(1)
					time.Sleep(100 * time.Microsecond)
					continue
				}
				if err != nil {
					failed.Store(err.Error())
					return
				}
				if id <= prev {
					failed.Store("not increasing")
					t.Errorf("worker %d: id %d after %d", w, id, prev)
					return
				}
				prev = id
				ids = append(ids, id)
			}
			out[w] = ids
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatalf("issuing failed: %v", f)
	}
	all := slices.Concat(out...)
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("duplicate id %d", all[i])
		}
	}
	if len(all) != workers*perWorker {
		t.Fatalf("%d IDs, want %d", len(all), workers*perWorker)
	}
	return refusals.Load()
}

// tb is what issue needs from *testing.T and *rapid.T.
type tb interface {
	Helper()
	Errorf(string, ...any)
	Fatalf(string, ...any)
}

type stepAt struct {
	worker, at int
	d          time.Duration
}

// TestNextID_NoDuplicatesUnderClockSteps is the issue's property at full size: 8 goroutines
// x 1,000,000 IDs from one 41/10/12 generator, the real clock plus steps back 1ms, 4ms, 6ms,
// 1s and forward 10s at random points.
func TestNextID_NoDuplicatesUnderClockSteps(t *testing.T) {
	const workers, perWorker = 8, 1_000_000
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	plan := make([]stepAt, 0, len(steps))
	for _, i := range r.Perm(len(steps)) {
		plan = append(plan, stepAt{worker: r.IntN(workers), at: r.IntN(perWorker), d: steps[i]})
	}
	clk := &steppingClock{}
	var waited, refused atomic.Int64
	g := mustNew(t, 1, WithClock(clk), WithHooks(Hooks{ClockBackwards: func(_ time.Duration, r bool) {
		if r {
			refused.Add(1)
		} else {
			waited.Add(1)
		}
	}}))
	start := time.Now()
	issue(t, g, clk, workers, perWorker, plan)
	t.Logf("8M IDs in %s; backwards waits %d, refusals %d", time.Since(start), waited.Load(), refused.Load())
	if refused.Load() == 0 {
		t.Fatal("the 1s step was never refused: the test did not exercise the clock policy")
	}
}

// TestNextID_PropertyNoDuplicates lets rapid pick the goroutines, counts and step schedule,
// on a virtual clock that runs at CPU speed.
func TestNextID_PropertyNoDuplicates(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		workers := rapid.IntRange(1, 8).Draw(rt, "workers")
		perWorker := rapid.IntRange(1, 3000).Draw(rt, "perWorker")
		layout := rapid.SampledFrom([]Layout{Layout41x10x12, Layout8x13, LayoutJSSafe}).Draw(rt, "layout")
		speed := int64(rapid.IntRange(20, 200).Draw(rt, "speed"))
		tick := time.Duration(rapid.IntRange(0, 2000).Draw(rt, "tickNs"))
		var plan []stepAt
		for i, d := range steps {
			if rapid.Bool().Draw(rt, "step"+string(rune('0'+i))) {
				plan = append(plan, stepAt{
					worker: rapid.IntRange(0, workers-1).Draw(rt, "stepWorker"),
					at:     rapid.IntRange(0, perWorker-1).Draw(rt, "stepAt"),
					d:      d,
				})
			}
		}
		clk := newVirtualClock(speed, tick)
		g, err := New(layout.MaxWorker(), WithLayout(layout), WithClock(clk))
		if err != nil {
			rt.Fatal(err)
		}
		issue(rt, g, clk, workers, perWorker, plan)
	})
}
