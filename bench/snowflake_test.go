package main

import (
	"context"
	"slices"
	"sync"
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
