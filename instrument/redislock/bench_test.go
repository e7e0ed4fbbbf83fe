package redislock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// rawRelease is the hand-written compare-and-delete every blog post shows:
// the floor lockgov's release is measured against.
var rawRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// cpuTime is this process's user+system CPU time. Redis runs in its own
// process, so this is the client's cost alone.
var cpuTime = testenv.ProcessCPU

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
}

// reportServer reports the server's CPU per op since start (testenv.ServerCPU).
func reportServer(b *testing.B, c *redis.Client, start time.Duration) {
	b.ReportMetric(float64(testenv.ServerCPU(b, c)-start)/float64(time.Microsecond)/float64(b.N), "server-cpu-µs/op")
}

// BenchmarkAcquireRelease compares one uncontended acquire+release pair:
// raw go-redis SET NX PX + EVALSHA, the redislock backend, and redislock
// through instrument.Govern (policy, spans with the global no-op tracer,
// metrics on a registry). Run the three in one invocation and compare the
// ns/op and cpu-µs/op columns as ratios.
func BenchmarkAcquireRelease(b *testing.B) {
	r := testenv.NewRedis(b)
	c := newClient(b, r.Addr())
	ctx := context.Background()
	deadline, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()

	b.Run("raw-setnx-evalsha", func(b *testing.B) {
		b.ReportAllocs()
		const tok = "6f1c1f4e-3c4d-4a52-9b8e-2f1f6a3b7c10"
		rawRelease.Load(ctx, c)
		srv := testenv.ServerCPU(b, c)
		start := cpuTime()
		b.ResetTimer()
		for b.Loop() {
			ok, err := c.SetNX(deadline, "lock:bench:raw", tok, 30*time.Second).Result()
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := rawRelease.Run(deadline, c, []string{"lock:bench:raw"}, tok).Err(); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, start)
		reportServer(b, c, srv)
	})
	backend := newLocker(b, c)
	run := func(b *testing.B, l instrument.Locker, key string) {
		b.ReportAllocs()
		srv := testenv.ServerCPU(b, c)
		start := cpuTime()
		b.ResetTimer()
		for b.Loop() {
			lease, err := l.Acquire(deadline, key, instrument.FailFast())
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(deadline); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, start)
		reportServer(b, c, srv)
	}
	b.Run("redislock", func(b *testing.B) { run(b, backend, "lock:bench:backend") })
	b.Run("redislock-fair", func(b *testing.B) { run(b, newLocker(b, c, redislock.Fair()), "lock:bench:fair") })
	governed, err := instrument.NewGoverned(backend, instrument.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("governed", func(b *testing.B) { run(b, governed, "lock:bench:governed") })
}

// BenchmarkAcquireReleaseInterleaved alternates a raw SET NX PX + EVALSHA
// pair and a governed redislock pair in the same loop on the same server and
// reports the mean time of each and their ratio, so that machine noise hits
// both sides alike. throughput-ratio is raw-ns / governed-ns (>= 0.95 is the
// target); commands/pair counts the client's round trips per governed pair.
func BenchmarkAcquireReleaseInterleaved(b *testing.B) {
	r := testenv.NewRedis(b)
	c := newClient(b, r.Addr())
	var commands int
	c.AddHook(countHook{&commands})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	governed, err := instrument.NewGoverned(newLocker(b, c), instrument.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	const tok = "6f1c1f4e-3c4d-4a52-9b8e-2f1f6a3b7c10"
	rawRelease.Load(ctx, c)
	// Warm both paths (script cache, pool) before measuring.
	if l, err := governed.Acquire(ctx, "lock:bench:gov", instrument.FailFast()); err == nil {
		_ = l.Release(ctx)
	}
	var rawT, govT time.Duration
	var govCommands int
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if ok, err := c.SetNX(ctx, "lock:bench:raw", tok, 30*time.Second).Result(); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := rawRelease.Run(ctx, c, []string{"lock:bench:raw"}, tok).Err(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		before := commands
		lease, err := governed.Acquire(ctx, "lock:bench:gov", instrument.FailFast())
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
		govCommands += commands - before
		rawT += t1.Sub(t0)
		govT += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(rawT.Nanoseconds())/n, "raw-ns/pair")
	b.ReportMetric(float64(govT.Nanoseconds())/n, "governed-ns/pair")
	b.ReportMetric(float64(rawT)/float64(govT), "throughput-ratio")
	b.ReportMetric(float64(govCommands)/n, "commands/pair")
}

// countHook counts the commands a client sends (one per round trip here:
// no pipelines are used).
type countHook struct{ n *int }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		*h.n++
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// BenchmarkAcquireReleaseReplicaAcks compares an uncontended pair on a
// primary with one replica, without and with WithReplicaAcks(1, ...): the
// acquire then waits for the replica's acknowledgement (WAIT after the
// script, in one pipeline). Both run against the same replicated primary,
// so the ratio is the cost of the acknowledgement alone.
func BenchmarkAcquireReleaseReplicaAcks(b *testing.B) {
	primary := testenv.NewRedis(b, testenv.WithRedisArgs("--repl-diskless-sync-delay", "0"))
	// The replica runs until the benchmark's cleanup stops it.
	testenv.NewRedis(b, testenv.WithRedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())))
	c := newClient(b, primary.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	// The primary counts the replica once it is in sync and acknowledged.
	testenv.WaitFor(b, time.Minute, "the replica to sync", func() bool {
		return c.Wait(ctx, 1, 50*time.Millisecond).Val() == 1
	})
	for _, bc := range []struct {
		name string
		opts []redislock.Option
	}{
		{"redislock", nil},
		{"redislock-acks1", []redislock.Option{redislock.WithReplicaAcks(1, 500*time.Millisecond)}},
	} {
		l := newLocker(b, c, bc.opts...)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			srv := testenv.ServerCPU(b, c)
			start := cpuTime()
			for b.Loop() {
				lease, err := l.Acquire(ctx, "lock:bench:acks", instrument.FailFast())
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, start)
			reportServer(b, c, srv)
		})
	}
}
