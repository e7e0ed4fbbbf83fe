package snowflake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// layout16 allows 16 IDs per millisecond, so goroutines run out of a millisecond's sequence
// at once, over and over, even under the race detector.
var layout16 = Layout{TimeBits: 41, WorkerBits: 18, SequenceBits: 4}

// TestNextID_GoroutinesAtSequenceLimit has 2-8 goroutines (and 100, more than may park at
// once) share a generator that is always at its sequence limit, half of them through Fill:
// every ID is distinct, each goroutine's
// IDs increase, no millisecond holds more than the layout allows, and nothing is left
// spinning or parked afterwards.
func TestNextID_GoroutinesAtSequenceLimit(t *testing.T) {
	for _, tc := range []struct{ workers, per int }{{2, 240}, {4, 240}, {8, 240}, {100, 20}} {
		workers, per := tc.workers, tc.per
		t.Run(fmt.Sprintf("%d goroutines", workers), func(t *testing.T) {
			var exhausted atomic.Int64
			g := mustNew(t, 1, WithLayout(layout16), WithHooks(Hooks{SequenceExhausted: func() { exhausted.Add(1) }}))
			out := make([][]int64, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					ids := make([]int64, 0, per)
					buf := make([]int64, 5)
					for len(ids) < per {
						if w%2 == 1 {
							if err := g.Fill(context.Background(), buf); err != nil {
								t.Error(err)
								return
							}
							ids = append(ids, buf...)
							continue
						}
						id, err := g.NextID(context.Background())
						if err != nil {
							t.Error(err)
							return
						}
						ids = append(ids, id)
					}
					out[w] = ids
				})
			}
			wg.Wait()
			perMs := map[int64]int{}
			for w, ids := range out {
				for i := 1; i < len(ids); i++ {
					if ids[i] <= ids[i-1] {
						t.Fatalf("goroutine %d: id %d after %d", w, ids[i], ids[i-1])
					}
				}
				for _, id := range ids {
					perMs[id>>22]++
				}
			}
			all := slices.Concat(out...)
			slices.Sort(all)
			if n := len(slices.Compact(all)); n != workers*per {
				t.Fatalf("%d distinct IDs, want %d", n, workers*per)
			}
			for ms, n := range perMs {
				if n > 16 {
					t.Fatalf("%d IDs in ms %d, the layout allows 16", n, ms)
				}
			}
			if exhausted.Load() == 0 {
				t.Fatal("the sequence never ran out: the test did not test the limit")
			}
			if g.spinning.Load() || g.parked.Load() != 0 {
				t.Fatalf("after every caller returned: spinning %v, parked %d", g.spinning.Load(), g.parked.Load())
			}
		})
	}
}

// frozenClock never advances, so a used-up sequence is waited for until the context ends.
type frozenClock struct{ wall time.Time }

func (c frozenClock) Wall() time.Time     { return c.wall }
func (c frozenClock) Mono() time.Duration { return time.Hour }

// TestNextID_ParkedWaiterHonoursContext: while one caller spins for the clock, another
// that must also wait returns with its context's error, and so does the holder.
func TestNextID_ParkedWaiterHonoursContext(t *testing.T) {
	g := mustNew(t, 1, WithLayout(layout16), WithClock(frozenClock{wall: time.Now()}))
	for range 16 {
		if _, err := g.NextID(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	errA := make(chan error, 1)
	go func() { _, err := g.NextID(ctxA); errA <- err }()
	for deadline := time.Now().Add(10 * time.Second); !g.spinning.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the first waiter never started spinning")
		}
		time.Sleep(time.Millisecond) // polling for the event, with a deadline
	}
	ctxB, cancelB := context.WithCancel(context.Background())
	errB := make(chan error, 1)
	go func() { _, err := g.NextID(ctxB); errB <- err }()
	cancelB()
	if err := <-errB; !errors.Is(err, context.Canceled) {
		t.Fatalf("parked caller: err = %v, want context.Canceled", err)
	}
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("spinner: err = %v, want context.Canceled", err)
	}
	if g.spinning.Load() || g.parked.Load() != 0 {
		t.Fatalf("after every caller returned: spinning %v, parked %d", g.spinning.Load(), g.parked.Load())
	}
}
