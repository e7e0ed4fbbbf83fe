package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// benchGoroutines is the number of concurrent buyers in the benchmarks.
const benchGoroutines = 64

// parallel makes RunParallel use benchGoroutines goroutines (it starts
// SetParallelism × GOMAXPROCS).
func parallel(b *testing.B) {
	b.SetParallelism((benchGoroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
}

// benchDeduct runs b.N deductions of 1 on way from 64 goroutines, from a
// stock that never runs out, and reports deductions/s. The quota way's
// ledger is flushed inside the timing, so its batched PostgreSQL writes are
// paid for.
func benchDeduct(b *testing.B, way Way) {
	ctx := context.Background()
	const stock = 1 << 40
	if err := way.Setup(ctx, stock); err != nil {
		b.Fatal(err)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var next atomic.Int64
	parallel(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := run + "-" + strconv.FormatInt(next.Add(1), 10)
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := way.Deduct(octx, 1, id)
			cancel()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	if q, ok := way.(*QuotaLedger); ok {
		q.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deductions/s")
	left, sold, err := way.Audit(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if left+sold != stock || sold != int64(b.N) {
		b.Fatalf("left %d + sold %d != stock %d, or sold != %d deductions", left, sold, int64(stock), b.N)
	}
}

// BenchmarkDeduct compares the four ways on one hot item with 64 concurrent
// buyers (docs/BENCHMARKS.md, "Quota and inventory deduction (issue 13)").
func BenchmarkDeduct(b *testing.B) {
	redisAddr, pgDSN := servers(b)
	env, err := Open(context.Background(), redisAddr, pgDSN, benchGoroutines)
	if err != nil {
		b.Fatal(err)
	}
	defer env.Close()
	for _, way := range env.Ways("bench") {
		b.Run(way.Name(), func(b *testing.B) { benchDeduct(b, way) })
	}
}

// BenchmarkClusterHotKey deducts from one hot key on a 3-primary Redis
// Cluster with 64 goroutines: unsharded (one slot, so one primary serves
// every deduction) against WithShards(8) (eight slots spread over the
// primaries).
func BenchmarkClusterHotKey(b *testing.B) {
	cc := testenv.NewRedisCluster(b, 3).Client(b)
	ctx := context.Background()
	for _, shards := range []int{1, 8} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			q, err := quota.New(cc, quota.WithShards(shards))
			if err != nil {
				b.Fatal(err)
			}
			key := fmt.Sprintf("hot:%d", shards)
			const stock = 1 << 40
			if err := q.Set(ctx, key, stock); err != nil {
				b.Fatal(err)
			}
			run := strconv.FormatInt(time.Now().UnixNano(), 36)
			var next atomic.Int64
			before := scriptCalls(b, cc)
			parallel(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := run + "-" + strconv.FormatInt(next.Add(1), 10)
					if _, err := q.Deduct(ctx, key, 1, id); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deductions/s")
			// How the deductions spread over the primaries: the busiest
			// one's share of the script calls (100 when one slot serves all).
			// And what they cost the servers: CPU of all primaries together
			// per deduction (on a machine with fewer cores than primaries,
			// this total is what bounds throughput, not one primary's core).
			var total, busiest int64
			// The busiest primary's CPU over the run's wall time says
			// whether one primary's core was the bottleneck (near 100) that
			// sharding removes.
			var cpu, hottest float64
			for addr, st := range scriptCalls(b, cc) {
				d := st.calls - before[addr].calls
				total += d
				busiest = max(busiest, d)
				cpu += st.cpu - before[addr].cpu
				hottest = max(hottest, st.cpu-before[addr].cpu)
			}
			if total > 0 {
				b.ReportMetric(100*float64(busiest)/float64(total), "busiest-primary-%")
				b.ReportMetric(cpu*1e6/float64(b.N), "redis-cpu-µs/op")
				b.ReportMetric(100*hottest/b.Elapsed().Seconds(), "hottest-primary-cpu-%")
			}
			left, err := q.Remaining(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if left != stock-int64(b.N) {
				b.Fatalf("remaining %d after %d deductions from %d", left, b.N, int64(stock))
			}
		})
	}
}

type primaryStats struct {
	calls int64   // EVALSHA and EVAL calls served
	cpu   float64 // used_cpu_user + used_cpu_sys, seconds
}

// scriptCalls returns the script calls each primary has served (INFO
// commandstats) and the CPU it has used (INFO cpu), by address.
func scriptCalls(b *testing.B, cc *redis.ClusterClient) map[string]primaryStats {
	b.Helper()
	var mu sync.Mutex
	stats := map[string]primaryStats{}
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			return err
		}
		var st primaryStats
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return fmt.Errorf("cpu line %q: %w", line, err)
				}
				st.cpu += f
				continue
			}
			if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
				continue
			}
			_, rest, _ := strings.Cut(line, "calls=")
			v, _, _ := strings.Cut(rest, ",")
			k, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("commandstats line %q: %w", line, err)
			}
			st.calls += k
		}
		mu.Lock()
		stats[c.Options().Addr] = st
		mu.Unlock()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return stats
}
