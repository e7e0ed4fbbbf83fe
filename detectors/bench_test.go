package detectors_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/detectors"
)

// BenchmarkScan runs the leaked-lock detector over N healthy lock keys on
// a real redis-server (N = 100,000, or $LOCKGOV_BENCH_KEYS: the 1,000,000
// case of docs/BENCHMARKS.md). The keys are written by this process; each
// scan runs in a fresh child process (this test binary, TestScanChild), so
// what the child reports is the scan alone: keys/s, allocations per key,
// the peak Go heap in use during the scan (peak-heap-MB: live objects and
// garbage not yet collected, sampled every 20ms; the more samples, the
// nearer it comes to the GC's heap goal), the peak live heap the GC found
// (peak-live-MB), the heap after the scan and a GC with the detector still
// alive (after-GC-MB: what it keeps between scans) and the child's peak RSS (VmHWM, the whole process from its start).
// Neither may grow with N: a scan holds one batch. (/usr/bin/time's maxrss
// would count the redis-server child, whose memory does grow with N.)
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
	var last scanResult
	var secs float64
	for b.Loop() {
		putBeat(b, ctx, c, selfBeat("self")) // the child sees this process's locks as live
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestScanChild$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "LOCKGOV_SCAN_CHILD="+c.Options().Addr, "LOCKGOV_SCAN_CHILD_KEYS="+strconv.Itoa(n))
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("scan child: %v\n%s", err, out)
		}
		_, line, ok := strings.Cut(string(out), "SCANRESULT ")
		if !ok {
			b.Fatalf("scan child printed no result:\n%s", out)
		}
		line, _, _ = strings.Cut(line, "\n")
		var r scanResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			b.Fatalf("scan child result %q: %v", line, err)
		}
		secs += r.Seconds
		last.PeakHeap = max(last.PeakHeap, r.PeakHeap)
		last.PeakLive = max(last.PeakLive, r.PeakLive)
		last.Retained = max(last.Retained, r.Retained)
		last.PeakRSS = max(last.PeakRSS, r.PeakRSS)
		last.Allocs += r.Allocs
		last.Bytes += r.Bytes
	}
	keys := float64(n) * float64(b.N)
	b.ReportMetric(keys/secs, "keys/s")
	b.ReportMetric(float64(last.Allocs)/keys, "allocs/key")
	b.ReportMetric(float64(last.Bytes)/keys, "B/key")
	b.ReportMetric(float64(last.PeakHeap)/(1<<20), "peak-heap-MB")
	b.ReportMetric(float64(last.PeakLive)/(1<<20), "peak-live-MB")
	b.ReportMetric(float64(last.Retained)/(1<<20), "after-GC-MB")
	if last.PeakRSS > 0 {
		b.ReportMetric(float64(last.PeakRSS)/1024, "peak-rss-MB")
	}
}

// scanResult is what TestScanChild reports to BenchmarkScan.
type scanResult struct {
	Seconds       float64 `json:"seconds"`
	Allocs, Bytes uint64
	PeakHeap      uint64 `json:"peak_heap"`
	PeakLive      uint64 `json:"peak_live"`
	Retained      uint64 `json:"retained"` // heap after the scan and a GC, the detector alive
	PeakRSS       int    `json:"peak_rss_kib"`
}

// TestScanChild is BenchmarkScan's child: one Detect over the keys of the
// redis-server at $LOCKGOV_SCAN_CHILD. Skipped unless that is set.
func TestScanChild(t *testing.T) {
	addr := os.Getenv("LOCKGOV_SCAN_CHILD")
	if addr == "" {
		t.Skip("run by BenchmarkScan")
	}
	n, err := strconv.Atoi(os.Getenv("LOCKGOV_SCAN_CHILD_KEYS"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, 30*time.Minute)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		DialTimeout: 2 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	defer func() { _ = c.Close() }()
	d, err := detectors.NewLocks(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var peak, peakLive atomic.Uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
			{Name: "/gc/heap/live:bytes"}}
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64() + s[1].Value.Uint64(); v > peak.Load() {
				peak.Store(v) // heap in use: live and not yet swept objects, and span fragmentation
			}
			if v := s[2].Value.Uint64(); v > peakLive.Load() {
				peakLive.Store(v) // what the last GC found live: what the scan retains
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	fs, err := d.Detect(ctx)
	secs := time.Since(start).Seconds()
	runtime.ReadMemStats(&after)
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC() // what the detector keeps from one scan to the next
	var kept runtime.MemStats
	runtime.ReadMemStats(&kept)
	runtime.KeepAlive(d)
	if len(fs) != 0 || d.Scanned() != uint64(n) {
		t.Fatalf("%d findings, %d keys scanned, want 0 and %d:%s", len(fs), d.Scanned(), n, describe(fs))
	}
	r := scanResult{Seconds: secs, Allocs: after.Mallocs - before.Mallocs, Bytes: after.TotalAlloc - before.TotalAlloc,
		PeakHeap: peak.Load(), PeakLive: peakLive.Load(), Retained: kept.HeapAlloc, PeakRSS: vmHWMKiB()}
	out, _ := json.Marshal(r)
	t.Log("SCANRESULT " + string(out))
}

// vmHWMKiB is this process's peak resident set (VmHWM), or 0 where /proc
// is not there.
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
