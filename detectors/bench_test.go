package detectors_test

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
)

// BenchmarkScan runs the leaked-lock detector over N healthy lock keys on
// a real redis-server (N = 100,000, or $LOCKGOV_BENCH_KEYS: the 1,000,000
// case of docs/BENCHMARKS.md) and reports keys/s and the peak Go heap in
// use during the scans (peak-heap-MB, sampled every 50ms), which must not
// grow with N: a scan holds one batch. (Measure the process's RSS with
// /proc/PID/status VmHWM: /usr/bin/time's maxrss counts the redis-server
// child, whose memory does grow with N.)
func BenchmarkScan(b *testing.B) {
	n := 100000
	if s := os.Getenv("LOCKGOV_BENCH_KEYS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("LOCKGOV_BENCH_KEYS=%q: want a positive integer", s)
		}
		n = v
	}
	ctx := timeout(b, 30*time.Minute)
	c := newRedis(b)
	fillHealthy(b, ctx, c, n)
	putBeat(b, ctx, c, selfBeat("self"))
	d, err := detectors.NewLocks(redisStore(b, c))
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var peak atomic.Uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		fs, err := d.Detect(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(fs) != 0 || d.Scanned() != uint64(n) {
			b.Fatalf("%d findings, %d keys scanned, want 0 and %d", len(fs), d.Scanned(), n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/time.Since(start).Seconds(), "keys/s")
	close(stop)
	<-sampled
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MB")
	if kb := vmHWMKiB(); kb > 0 {
		b.ReportMetric(float64(kb)/1024, "peak-rss-MB")
	}
}

// vmHWMKiB is this process's peak resident set (VmHWM), setup included, or
// 0 where /proc is not there.
func vmHWMKiB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
