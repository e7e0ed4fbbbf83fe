package redislock_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// benchDuration is how long each contended or parallel measurement runs:
// LOCKGOV_BENCH_DURATION (a Go duration), default 3s.
func benchDuration(b *testing.B) time.Duration {
	d := 3 * time.Second
	if s := os.Getenv("LOCKGOV_BENCH_DURATION"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("LOCKGOV_BENCH_DURATION: %v", err)
		}
		d = v
	}
	return d
}

// BenchmarkContended is issue 12's contention measurement without the
// peers: 8 contenders on one key, each with its own go-redis client and its
// own Locker (like 8 processes), each holding the lock ~1 ms and asking
// again at once. It runs for LOCKGOV_BENCH_DURATION whatever b.N is (run it
// with -benchtime 1x) and reports:
//
//	acq/s       acquisitions per second, all contenders
//	busy-%      sum of the measured holds / wall time
//	p50-wait-ms, p99-wait-ms, max-wait-ms   Acquire call to return
//	min/max     fewest / most acquisitions of one contender
//	conns/acq   new connections (all clients) per acquisition
//	cmds/acq    commands sent (all clients) per acquisition
//	p50-handoff-µs  from a holder calling Release to the next holder's
//	            Acquire returning (the lock's idle time per acquisition)
//	p99-handoff-µs  its 99th percentile
//	p50-rtt-µs  a PING round trip on another client, sampled during the run
//	handoff/rtt the two medians' ratio: how many round trips a handoff
//	            costs, which machine load moves less than either
//	server-µs/script  redis-server's time per EVALSHA (INFO commandstats)
//	p50-hold-ms, p99-hold-ms  the measured holds (a 1 ms sleep overshoots
//	            on a loaded machine, and a waiter waits for 7 of them)
//
// The go-redis clients are the package tests' (newClient).
func BenchmarkContended(b *testing.B) {
	_, seed := setup(b)
	_ = seed
	for _, tc := range []struct {
		name string
		opts []redislock.Option
	}{
		{"wait", nil},
		{"fair", []redislock.Option{redislock.Fair()}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r, _ := setup(b)
			runContended(b, r.Addr(), tc.opts)
		})
	}
}

const (
	contenders = 8
	holdFor    = time.Millisecond
)

func runContended(b *testing.B, addr string, opts []redislock.Option) {
	var dials, cmds atomic.Int64
	lockers := make([]*redislock.Locker, contenders)
	for i := range lockers {
		c := newClient(b, addr)
		c.AddHook(statHook{dials: &dials, cmds: &cmds})
		lockers[i] = newLocker(b, c, opts...)
	}
	const key = "lock:bench:contended"
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	// Warm every client (pool connection, script cache, pub/sub).
	for _, l := range lockers {
		lease, err := l.Acquire(ctx, key, instrument.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	d := benchDuration(b)
	dials.Store(0)
	cmds.Store(0)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		waits []time.Duration
		held  time.Duration
		count = make([]int, contenders)
		stop  atomic.Bool
		gaps  []time.Duration
		holds []time.Duration
		rtts  []time.Duration
		// lastRelease is when the current holder called Release, in ns
		// since start (0: nobody released yet).
		lastRelease atomic.Int64
	)
	pinger := newClient(b, addr)
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		for !stop.Load() {
			t := time.Now()
			if err := pinger.Ping(ctx).Err(); err != nil {
				return
			}
			rtts = append(rtts, time.Since(t))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	b.ResetTimer()
	start := time.Now()
	for i, l := range lockers {
		wg.Go(func() {
			var myWaits, myGaps, myHolds []time.Duration
			var myHeld time.Duration
			for !stop.Load() {
				t0 := time.Now()
				actx, acancel := context.WithTimeout(ctx, 10*time.Second)
				lease, err := l.Acquire(actx, key, instrument.WithTTL(10*time.Second))
				acancel()
				if err != nil {
					b.Error(err)
					return
				}
				t1 := time.Now()
				if r := lastRelease.Load(); r != 0 {
					myGaps = append(myGaps, t1.Sub(start)-time.Duration(r))
				}
				myWaits = append(myWaits, t1.Sub(t0))
				time.Sleep(holdFor)
				t2 := time.Now()
				myHeld += t2.Sub(t1)
				myHolds = append(myHolds, t2.Sub(t1))
				lastRelease.Store(int64(t2.Sub(start)))
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
			mu.Lock()
			waits = append(waits, myWaits...)
			gaps = append(gaps, myGaps...)
			holds = append(holds, myHolds...)
			held += myHeld
			count[i] = len(myWaits)
			mu.Unlock()
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	wall := time.Since(start)
	b.StopTimer()
	<-pingDone
	// Server time per script call (wall time inside redis-server, which a
	// loaded machine inflates like everything else).
	if st, err := pinger.Info(ctx, "commandstats").Result(); err == nil {
		for line := range strings.Lines(st) {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
				for field := range strings.SplitSeq(strings.TrimSpace(rest), ",") {
					if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
						if f, err := strconv.ParseFloat(v, 64); err == nil {
							b.ReportMetric(f, "server-µs/script")
						}
					}
				}
			}
		}
	}
	reportContended(b, wall, held, waits, count, dials.Load(), cmds.Load())
	if len(gaps) > 0 && len(rtts) > 0 {
		slices.Sort(gaps)
		slices.Sort(rtts)
		g, r := gaps[len(gaps)/2], rtts[len(rtts)/2]
		b.ReportMetric(float64(g)/float64(time.Microsecond), "p50-handoff-µs")
		b.ReportMetric(float64(gaps[len(gaps)*99/100])/float64(time.Microsecond), "p99-handoff-µs")
		b.ReportMetric(float64(r)/float64(time.Microsecond), "p50-rtt-µs")
		b.ReportMetric(float64(g)/float64(r), "handoff/rtt")
	}
	// How long the holds themselves ran (time.Sleep(1ms) on a loaded
	// machine): a waiter behind 7 others waits 7 of them.
	slices.Sort(holds)
	b.ReportMetric(float64(holds[len(holds)/2])/float64(time.Millisecond), "p50-hold-ms")
	b.ReportMetric(float64(holds[len(holds)*99/100])/float64(time.Millisecond), "p99-hold-ms")
}

func reportContended(b *testing.B, wall, held time.Duration, waits []time.Duration, count []int, dials, cmds int64) {
	slices.Sort(waits)
	n := len(waits)
	if n == 0 {
		b.Fatal("no acquisitions")
	}
	q := func(p float64) float64 {
		return float64(waits[min(n-1, int(p*float64(n)))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(n)/wall.Seconds(), "acq/s")
	b.ReportMetric(100*float64(held)/float64(wall), "busy-%")
	b.ReportMetric(q(0.50), "p50-wait-ms")
	b.ReportMetric(q(0.99), "p99-wait-ms")
	b.ReportMetric(float64(waits[n-1])/float64(time.Millisecond), "max-wait-ms")
	b.ReportMetric(float64(slices.Min(count))/float64(max(1, slices.Max(count))), "min/max")
	b.ReportMetric(float64(dials)/float64(n), "conns/acq")
	b.ReportMetric(float64(cmds)/float64(n), "cmds/acq")
	b.ReportMetric(0, "ns/op")
	b.Logf("acquisitions per contender: %v", count)
}

// statHook counts dials and commands of a client.
type statHook struct{ dials, cmds *atomic.Int64 }

func (h statHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}
func (h statHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}
func (h statHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// BenchmarkUncontendedParallel is issue 12's uncontended comparison without
// the peers: 16 goroutines, each on its own key, one shared client, in one
// run: the raw floor (SET NX PX + EVALSHA compare-and-delete), the bare
// redislock Locker, and redislock through Govern (metrics on a registry,
// spans with the global no-op tracer, fences). The variants take turns in
// rotating order for LOCKGOV_BENCH_ROUNDS rounds (default 5) of
// LOCKGOV_BENCH_DURATION/5 each, and the medians of the per-round ratios
// are reported: bare/raw and governed/raw throughput, and governed/raw
// client CPU per pair (getrusage: the client's CPU alone, Redis is another
// process). Run it with -benchtime 1x.
func BenchmarkUncontendedParallel(b *testing.B) {
	r, c := setup(b)
	_ = r
	const workers = 16
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	rawRelease.Load(ctx, c)
	bare := newLocker(b, c)
	governed, err := instrument.NewGoverned(bare, instrument.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	const tok = "6f1c1f4e-3c4d-4a52-9b8e-2f1f6a3b7c10"
	raw := func(key string) error {
		ok, err := c.SetNX(ctx, key, tok, 30*time.Second).Result()
		if err != nil || !ok {
			return fmt.Errorf("raw: %v %w", ok, err)
		}
		return rawRelease.Run(ctx, c, []string{key}, tok).Err()
	}
	locked := func(l instrument.Locker) func(string) error {
		return func(key string) error {
			lease, err := l.Acquire(ctx, key, instrument.FailFast())
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}
	}
	variants := []struct {
		name string
		pair func(key string) error
	}{{"raw", raw}, {"bare", locked(bare)}, {"governed", locked(governed)}}

	rounds := 5
	if s := os.Getenv("LOCKGOV_BENCH_ROUNDS"); s != "" {
		if _, err := fmt.Sscan(s, &rounds); err != nil || rounds < 1 {
			b.Fatalf("LOCKGOV_BENCH_ROUNDS: %q", s)
		}
	}
	slice := benchDuration(b) / 5
	measure := func(name string, pair func(string) error, d time.Duration) (opsPerSec, cpuPerOp, srvPerOp float64) {
		var ops atomic.Int64
		var stop atomic.Bool
		var wg sync.WaitGroup
		srv0 := testenv.ServerCPU(b, c)
		cpu0 := cpuTime()
		t0 := time.Now()
		for w := range workers {
			key := fmt.Sprintf("lock:bench:par:%s:%d", name, w)
			wg.Go(func() {
				for !stop.Load() {
					if err := pair(key); err != nil {
						b.Error(err)
						return
					}
					ops.Add(1)
				}
			})
		}
		time.Sleep(d)
		stop.Store(true)
		wg.Wait()
		wall := time.Since(t0)
		n := float64(ops.Load())
		cpu := float64(cpuTime()-cpu0) / float64(time.Microsecond) / n
		return n / wall.Seconds(), cpu, float64(testenv.ServerCPU(b, c)-srv0) / float64(time.Microsecond) / n
	}
	for _, v := range variants { // warm up
		measure(v.name, v.pair, 100*time.Millisecond)
	}
	tput := make([][]float64, len(variants))
	cpu := make([][]float64, len(variants))
	srv := make([][]float64, len(variants))
	b.ResetTimer()
	for round := range rounds {
		for j := range variants {
			i := (round + j) % len(variants)
			t, c, sc := measure(variants[i].name, variants[i].pair, slice)
			tput[i] = append(tput[i], t)
			cpu[i] = append(cpu[i], c)
			srv[i] = append(srv[i], sc)
		}
	}
	b.StopTimer()
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	ratio := func(a, bb []float64) float64 {
		r := make([]float64, len(a))
		for i := range a {
			r[i] = a[i] / bb[i]
		}
		return median(r)
	}
	b.ReportMetric(median(tput[0]), "raw-pairs/s")
	b.ReportMetric(ratio(tput[1], tput[0]), "bare/raw")
	b.ReportMetric(ratio(tput[2], tput[0]), "governed/raw")
	b.ReportMetric(median(cpu[0]), "raw-cpu-µs/pair")
	b.ReportMetric(ratio(cpu[2], cpu[0]), "governed/raw-cpu")
	b.ReportMetric(ratio(cpu[1], cpu[0]), "bare/raw-cpu")
	b.ReportMetric(median(srv[0]), "raw-server-µs/pair")
	b.ReportMetric(median(srv[2]), "governed-server-µs/pair")
	b.ReportMetric(median(srv[1]), "bare-server-µs/pair")
	total := func(i int) []float64 {
		t := make([]float64, len(cpu[i]))
		for j := range t {
			t[j] = cpu[i][j] + srv[i][j]
		}
		return t
	}
	// On a machine where client and server share the cores, throughput
	// follows the CPU both spend per pair: raw total / governed total is
	// the throughput ratio the CPU allows.
	b.ReportMetric(ratio(total(0), total(2)), "raw/governed-total-cpu")
	b.ReportMetric(0, "ns/op")
}
