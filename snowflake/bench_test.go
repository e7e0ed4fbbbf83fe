package snowflake

import (
	"context"
	"testing"
)

// roomy has room in the sequence (2^22 IDs per ms), so the benchmark measures the hot path,
// not the layout's speed limit.
var roomy = Layout{TimeBits: 41, WorkerBits: 0, SequenceBits: 22}

func BenchmarkNextID(b *testing.B) {
	for _, bc := range []struct {
		name string
		l    Layout
	}{{"41x10x12", DefaultLayout}, {"hot-41x0x22", roomy}} {
		b.Run(bc.name, func(b *testing.B) {
			g := mustNew(b, 0, WithLayout(bc.l))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.NextID(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
		})
	}
}

func BenchmarkNextIDParallel(b *testing.B) {
	g := mustNew(b, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := g.NextID(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
}

func BenchmarkFill(b *testing.B) {
	g := mustNew(b, 0, WithLayout(roomy))
	ctx := context.Background()
	buf := make([]int64, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Fill(ctx, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(buf))/b.Elapsed().Seconds(), "ids/s")
}

// BenchmarkSegmentNext is Segment.Next on a buffer of 4096, one goroutine and GOMAXPROCS
// goroutines: a buffered ID should cost a pop, less than NextID's clock read.
func BenchmarkSegmentNext(b *testing.B) {
	for _, par := range []bool{false, true} {
		name := "1-goroutine"
		if par {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			s, err := NewSegment(mustNew(b, 0, WithLayout(roomy)), 4096)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			b.ReportAllocs()
			if !par {
				for b.Loop() {
					if _, err := s.Next(ctx); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Next(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
		})
	}
}
