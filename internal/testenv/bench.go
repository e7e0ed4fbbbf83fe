package testenv

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchRedisOps runs a benchmark's operation b.N times against the
// redis-server c talks to and reports, besides ns/op and allocations, unit
// per second, this process's CPU per op (cpu-µs/op) and redis-server's
// (redis-cpu-µs/op): on a machine where client and server share the cores,
// throughput follows the sum of the two. newOp is called once per goroutine
// and returns that goroutine's operation; parallel runs it from 8 x
// GOMAXPROCS goroutines (b.SetParallelism(8), as the lock benchmarks), else
// from one. The first error fails the benchmark.
func BenchRedisOps(b *testing.B, c redis.UniversalClient, unit string, parallel bool, newOp func() func() error) {
	b.Helper()
	b.ReportAllocs()
	srv := ServerCPU(b, c)
	cpu := ProcessCPU()
	b.ResetTimer()
	if parallel {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			op := newOp()
			for pb.Next() {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	} else {
		op := newOp()
		for b.Loop() {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
	b.ReportMetric(float64(ProcessCPU()-cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(ServerCPU(b, c)-srv)/float64(time.Microsecond)/float64(b.N), "redis-cpu-µs/op")
}
