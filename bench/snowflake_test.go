package main

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bw "github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake/v2"

	"github.com/lockgov/lockgov/snowflake"
)

// generators returns a fresh next func per library for l. bwmarrin/snowflake keeps its bit
// widths in package variables, so its generator must be created (and used) before the next
// one changes them; benchmarks run sequentially, so that holds.
func generators(b testing.TB, l layout) map[string]func() (int64, error) {
	lg, err := snowflake.New(1, snowflake.WithLayout(snowflake.Layout{TimeBits: 41, WorkerBits: l.worker, SequenceBits: l.sequenceBits}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	return map[string]func() (int64, error){
		"lockgov": func() (int64, error) { return lg.NextID(ctx) },
		"bwmarrin": func() func() (int64, error) {
			bw.NodeBits, bw.StepBits = uint8(l.worker), uint8(l.sequenceBits)
			bw.Epoch = snowflake.DefaultEpoch.UnixMilli()
			n, err := bw.NewNode(1)
			if err != nil {
				b.Fatal(err)
			}
			return func() (int64, error) { return n.Generate().Int64(), nil }
		}(),
		"sonyflake": func() func() (int64, error) {
			sf, err := sonyflake.New(sonyflake.Settings{
				BitsSequence: l.sequenceBits, BitsMachineID: l.worker, TimeUnit: time.Millisecond,
				StartTime: snowflake.DefaultEpoch, MachineID: func() (int, error) { return 1, nil },
			})
			if err != nil {
				b.Fatal(err)
			}
			return sf.NextID
		}(),
	}
}

var libs = []string{"lockgov", "bwmarrin", "sonyflake"}

// BenchmarkNextID is one goroutine asking for IDs one at a time.
func BenchmarkNextID(b *testing.B) {
	for _, l := range layouts {
		for _, lib := range libs {
			b.Run(l.name+"/"+lib, func(b *testing.B) {
				next := generators(b, l)[lib]
				b.ReportAllocs()
				for b.Loop() {
					if _, err := next(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
			})
		}
	}
}

// BenchmarkNextIDParallel is GOMAXPROCS goroutines sharing one generator.
func BenchmarkNextIDParallel(b *testing.B) {
	for _, l := range layouts {
		for _, lib := range libs {
			b.Run(l.name+"/"+lib, func(b *testing.B) {
				next := generators(b, l)[lib]
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := next(); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
			})
		}
	}
}

// BenchmarkBatch is 4096 IDs per call: lockgov's Fill (one CAS per millisecond's worth),
// the peers' NextID in a loop (they have no batch call).
func BenchmarkBatch(b *testing.B) {
	const batch = 4096
	for _, lib := range libs {
		b.Run("41x1x21/"+lib, func(b *testing.B) {
			buf := make([]int64, batch)
			var fill func() error
			if lib == "lockgov" {
				g, err := snowflake.New(1, snowflake.WithLayout(snowflake.Layout{TimeBits: 41, WorkerBits: 1, SequenceBits: 21}))
				if err != nil {
					b.Fatal(err)
				}
				fill = func() error { return g.Fill(context.Background(), buf) }
			} else {
				next := generators(b, layouts[1])[lib]
				fill = func() error {
					for i := range buf {
						id, err := next()
						if err != nil {
							return err
						}
						buf[i] = id
					}
					return nil
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := fill(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "ids/s")
		})
	}
}

// BenchmarkRounds measures the three libraries in alternating windows of 20 ms each (150 ms
// for limit-parallel), in rotating order, one round per b.Loop iteration (run it with
// -benchtime Nx for N rounds), and reports medians over the rounds: on a shared machine the
// CPU a process gets drifts by more than the differences measured, so only ratios taken side
// by side in the same round mean anything.
//
//   - limit/41x10x12: one goroutine per library. <lib>-%limit is its rate as a share of the
//     layout's limit (4096 IDs per millisecond), over the whole milliseconds of the slice: the
//     IDs of the milliseconds between its first and last ID / (4096 x their number). On a
//     shared machine a process waits for a CPU for part of the time, and no generator can issue
//     IDs in the milliseconds it is not running; <lib>-%fill leaves those out: the same IDs /
//     (4096 x those milliseconds in which it issued any), the share of each millisecond's
//     sequence used in the milliseconds it ran (one it was preempted in still counts, so this
//     is a lower bound). lockgov/<peer> is the ratio of the two libraries' IDs/s in the round.
//   - hot/41x1x21: one goroutine, a layout with room for 2M IDs per millisecond, so the hot
//     path itself. <lib>-ns/ID is wall time per ID; lockgov/<peer> is the ratio of IDs/s in
//     the same round (> 1: lockgov faster).
//   - parallel/41x1x21: the same with GOMAXPROCS goroutines sharing one generator.
//   - limit-parallel/41x10x12: GOMAXPROCS goroutines sharing one generator at the layout's
//     limit, where they all run out of a millisecond's sequence at the same moment, in windows
//     of 150 ms (the runner's), long enough for the OS to preempt the goroutines' threads.
//     <lib>-%limit is IDs/s over the whole window as a share of 4,096,000 (the goroutines'
//     own milliseconds overlap, so the per-goroutine accounting above does not add up);
//     lockgov/<peer> is the ratio of IDs/s in the same round.
func BenchmarkRounds(b *testing.B) {
	const window = 20 * time.Millisecond
	for _, c := range []struct {
		name       string
		l          layout
		goroutines int
		window     time.Duration
	}{
		{"limit/41x10x12", layouts[0], 1, window},
		{"hot/41x1x21", layouts[1], 1, window},
		{"parallel/41x1x21", layouts[1], runtime.GOMAXPROCS(0), window},
		{"limit-parallel/41x10x12", layouts[0], runtime.GOMAXPROCS(0), 150 * time.Millisecond},
	} {
		b.Run(c.name, func(b *testing.B) {
			rate := map[string][]float64{}
			limit := map[string][]float64{}
			fill := map[string][]float64{}
			ratio := map[string][]float64{}
			round := 0
			for b.Loop() {
				got := map[string]float64{}
				for i := range libs {
					lib := libs[(round+i)%len(libs)]
					next := generators(b, c.l)[lib]
					r, err := runFor(next, c.goroutines, c.window)
					if err != nil {
						b.Fatalf("%s: %v", lib, err)
					}
					got[lib] = float64(r.ids) / r.took.Seconds()
					rate[lib] = append(rate[lib], got[lib])
					if c.goroutines > 1 && c.l.sequenceBits == 12 {
						limit[lib] = append(limit[lib], got[lib]/4096e3)
					} else if r.span > 0 && r.ran > 0 {
						limit[lib] = append(limit[lib], float64(r.inner)/float64(4096*r.span))
						fill[lib] = append(fill[lib], float64(r.inner)/float64(4096*r.ran))
					}
				}
				for _, peer := range libs[1:] {
					ratio[peer] = append(ratio[peer], got["lockgov"]/got[peer])
				}
				round++
			}
			for _, lib := range libs {
				if c.l.sequenceBits == 12 {
					b.ReportMetric(100*median(limit[lib]), lib+"-%limit")
					if c.goroutines == 1 {
						b.ReportMetric(100*median(fill[lib]), lib+"-%fill")
					}
				} else {
					b.ReportMetric(1e9/median(rate[lib]), lib+"-ns/ID")
				}
			}
			for _, peer := range libs[1:] {
				b.ReportMetric(median(ratio[peer]), "lockgov/"+peer)
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// slice is what runFor measured. inner, span and ran are summed over the goroutines and
// leave out each goroutine's first and last millisecond, which the window cuts: inner is the
// IDs of the milliseconds in between, span their number, ran the number of them that carry
// any ID (every library here puts the time above bit 22 in both layouts).
type slice struct {
	ids, inner, span, ran int64
	took                  time.Duration
}

// runFor has goroutines goroutines call next for about d.
func runFor(next func() (int64, error), goroutines int, d time.Duration) (slice, error) {
	var (
		stop     atomic.Bool
		mu       sync.Mutex
		sum      slice
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range goroutines {
		wg.Go(func() {
			var n, ms, first, last, inFirst, inLast int64 = 0, 0, -1, -1, 0, 0
			for !stop.Load() {
				for range 64 {
					id, err := next()
					if err != nil {
						mu.Lock()
						firstErr = cmp.Or(firstErr, err)
						mu.Unlock()
						stop.Store(true)
						break
					}
					n++
					t := id >> 22
					if t != last {
						last, inLast, ms = t, 0, ms+1
					}
					if first < 0 {
						first = t
					}
					if t == first {
						inFirst++
					}
					inLast++
				}
			}
			mu.Lock()
			sum.ids += n
			if ms > 2 {
				sum.inner += n - inFirst - inLast
				sum.span += last - first - 1
				sum.ran += ms - 2
			}
			mu.Unlock()
		})
	}
	time.Sleep(d) // the measuring window, not synchronisation
	stop.Store(true)
	wg.Wait()
	sum.took = time.Since(start)
	if firstErr != nil {
		return slice{}, fmt.Errorf("generating: %w", firstErr)
	}
	return sum, nil
}

// BenchmarkClockRead is the floor under every generator here: one clock read per ID.
func BenchmarkClockRead(b *testing.B) {
	start := time.Now()
	var sink time.Duration
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sink += time.Duration(time.Now().UnixNano())
		}
	})
	b.Run("time.Since", func(b *testing.B) {
		for b.Loop() {
			sink += time.Since(start)
		}
	})
	_ = sink
}

// TestParallel_NoLoss checks what the parallel benchmark cannot: 8 goroutines sharing one
// generator get every ID they asked for, all distinct, for each library.
func TestParallel_NoLoss(t *testing.T) {
	const workers, per = 8, 50_000
	for _, lib := range libs {
		t.Run(lib, func(t *testing.T) {
			next := generators(t, layouts[0])[lib]
			out := make([][]int64, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for range per {
						id, err := next()
						if err != nil {
							t.Error(err)
							return
						}
						out[w] = append(out[w], id)
					}
				})
			}
			wg.Wait()
			all := slices.Concat(out...)
			slices.Sort(all)
			distinct := len(slices.Compact(slices.Clone(all)))
			if len(all) != workers*per || distinct != workers*per {
				t.Fatalf("%s: %d IDs, %d distinct, want %d", lib, len(all), distinct, workers*per)
			}
		})
	}
}
