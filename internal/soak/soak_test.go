package soak_test

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/lockgov/lockgov/internal/soak"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
)

// TestSoak is issue 14's load and soak: 64 clients acquire, hold and
// release locks on 1,000 keys through Govern (redislock on a real
// redis-server, a Prometheus registry, an OpenTelemetry tracer provider,
// slog), while idempotency Store.Do and quota Deduct traffic runs and a
// lockgov agent scans the same Redis. It checks that goroutines and the
// live heap stay flat (the end of the run against a warmed-up baseline,
// with generous slack: no timing), that no owner token issued during the
// run appears in any span, log line, metric, agent API answer or
// heartbeat, and reports error rates and p99s.
//
// The short form (64 x LOCKGOV_SOAK_OPS cycles, default 300) runs in the
// test command; scripts/soak runs the long one (LOCKGOV_SOAK=30m: run for
// that long).
func TestSoak(t *testing.T) {
	cfg := soak.Config{Clients: 64, Keys: 1000, OpsPerClient: 300, IdempotencyClients: 8, QuotaClients: 8,
		Agent: true, Dir: t.TempDir(), MaxCaptureBytes: 1 << 30}
	if s := os.Getenv("LOCKGOV_SOAK_OPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LOCKGOV_SOAK_OPS=%q: want a positive integer", s)
		}
		cfg.OpsPerClient = n
	}
	timeout := 10 * time.Minute
	if s := os.Getenv("LOCKGOV_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("LOCKGOV_SOAK=%q: want a duration such as 30m", s)
		}
		cfg.Duration, cfg.OpsPerClient = d, 0
		cfg.AgentPoll, cfg.SamplePeriod = 5*time.Second, time.Second
		timeout = d + 15*time.Minute
	}
	if dir := os.Getenv("LOCKGOV_SOAK_DIR"); dir != "" {
		cfg.Dir = dir // keep the capture and tokens for a look afterwards
	}
	cfg.Progress = func(s string) { t.Log(s) }
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r := testenv.NewRedis(t)
	cfg.RedisAddr = r.Addr()

	rep, err := soak.Run(ctx, cfg)
	if rep != nil {
		t.Logf("soak report (%d clients, %d keys):\n%s", cfg.Clients, cfg.Keys, rep.Summary)
		if p := os.Getenv("LOCKGOV_SOAK_REPORT"); p != "" && rep.Summary != "" {
			if err := os.WriteFile(p, []byte(rep.Summary), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}

	// Traffic: every kind ran; errors below 1% (a cycle has 10s to acquire
	// a key 64 clients share with 999 others, so any error is news).
	if cfg.Duration == 0 && rep.Lock.Ops != uint64(cfg.Clients*cfg.OpsPerClient) {
		t.Errorf("%d lock cycles, want %d", rep.Lock.Ops, cfg.Clients*cfg.OpsPerClient)
	}
	for name, k := range map[string]soak.KindStats{"lock": rep.Lock, "idempotency": rep.Idempotency, "quota": rep.Quota} {
		if k.Ops == 0 || k.ErrorRate() > 0.01 {
			t.Errorf("%s: %d ops, %d errors", name, k.Ops, k.Errors)
		}
	}

	// Owner tokens: one per acquired lease (at least every successful
	// cycle, at most every cycle), none in any output.
	if got, ok := uint64(rep.Tokens), rep.Lock.Ops-rep.Lock.Errors; got < ok || got > rep.Lock.Ops {
		t.Errorf("%d distinct owner tokens collected, want one per acquired lease (%d..%d)", got, ok, rep.Lock.Ops)
	}
	for _, kind := range []string{"span", "metrics", "api", "heartbeat"} {
		if rep.Lines[kind] == 0 {
			t.Errorf("nothing of kind %q captured: the scan would prove nothing about it", kind)
		}
	}
	for _, h := range rep.Hits {
		t.Errorf("owner token in a %s: %s", h.Kind, h.Line)
	}

	// Goroutines flat: the last quarter of the run has no more than the
	// second (plus slack), and once the load is gone the count is back to
	// what it was before it (the pool and timers settle by polling).
	bw, fw := rep.BaselineWindow, rep.FinalWindow
	if bw.N < 3 || fw.N < 3 {
		t.Fatalf("too few samples to judge (%d at 25-50%%, %d at 75-100%%)", bw.N, fw.N)
	}
	if fw.MaxGorout > bw.MaxGorout+max(bw.MaxGorout/4, 16) {
		t.Errorf("goroutines grew: at most %d at 25-50%% of the run, %d at 75-100%%", bw.MaxGorout, fw.MaxGorout)
	}
	if rep.GoroutinesAfter > rep.GoroutinesBefore+4 {
		t.Errorf("goroutines: %d before the load, %d after it", rep.GoroutinesBefore, rep.GoroutinesAfter)
	}
	// Heap flat: the floor of the live heap in the last quarter, and the
	// live heap after the run, stay within 1.5x + 8 MiB of the peak live
	// heap of the warmed-up second quarter. (A leak of 1 KiB per cycle
	// would add ~10 MiB in the short form, more in the long one.)
	limit := bw.MaxHeapLive*3/2 + 8<<20
	if fw.MinHeapLive > limit || rep.HeapLiveAfter > limit {
		t.Errorf("live heap grew: peak %d at 25-50%%, floor %d at 75-100%%, %d after the run (limit %d)",
			bw.MaxHeapLive, fw.MinHeapLive, rep.HeapLiveAfter, limit)
	}
}

// TestTokenScan_FindsAPlantedToken: the scan that must find no token finds
// one where it is (inside other base64url text too), and only there.
func TestTokenScan_FindsAPlantedToken(t *testing.T) {
	dir := t.TempDir()
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	tok := base64.RawURLEncoding.EncodeToString(raw[:])
	other := base64.RawURLEncoding.EncodeToString(make([]byte, 16))
	if err := os.WriteFile(filepath.Join(dir, "tokens.txt"), []byte(tok+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	toks, err := soak.LoadTokens(filepath.Join(dir, "tokens.txt"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := soak.NewCapture(filepath.Join(dir, "capture.txt"), 0)
	if err != nil {
		t.Fatal(err)
	}
	c.Record("span", []byte(`name="acquire lock" lockgov.key="lock:x" trace=0123456789abcdef0123456789abcdef`))
	c.Record("log", []byte("level=INFO msg=ok token="+other))
	c.Record("metrics", []byte("# HELP x\nx{a=\"b\"} 1\nx{a=\"pre"+tok+"post\"} 2"))
	c.Record("heartbeat", []byte(`lockgov:fleet:a {"locks":["`+tok+`"]}`))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "capture.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	hits, lines, err := toks.Scan(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 2 || hits[0].Kind != "metrics" || hits[1].Kind != "heartbeat" || strings.Contains(hits[0].Line, tok) {
		t.Fatalf("hits %+v, want the metrics line and the heartbeat, token masked", hits)
	}
	if lines["metrics"] != 3 || lines["span"] != 1 {
		t.Errorf("lines %v", lines)
	}
}

// TestCardinality_100000KeysBoundedSeries sends 100,000 distinct lock keys
// of five shapes (numeric ids, UUIDs, hashes, mixed tokens and made-up
// words the normaliser cannot recognise) through Govern and counts the
// series in its registry: label values are key patterns, capped by the
// policy's MaxPatterns, so the count after 100,000 keys is the count after
// 50,000.
func TestCardinality_100000KeysBoundedSeries(t *testing.T) {
	const n = 100000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r := testenv.NewRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), PoolSize: 32, ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }()
	rl, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gov, err := instrument.NewGoverned(rl, instrument.WithRegisterer(reg), instrument.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gov.Close() }()
	key := func(i int) string {
		switch i % 5 {
		case 0:
			return "lock:order:" + strconv.Itoa(i)
		case 1:
			var u [16]byte
			_, _ = rand.Read(u[:])
			h := hex.EncodeToString(u[:])
			return "lock:user:" + h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
		case 2:
			s := sha1.Sum([]byte(strconv.Itoa(i)))
			return "lock:blob:" + hex.EncodeToString(s[:])
		case 3:
			return fmt.Sprintf("lock:session:%x%dabc", i*7919, i)
		default:
			var w [6]byte
			_, _ = rand.Read(w[:])
			for j := range w {
				w[j] = 'a' + w[j]%26
			}
			return "lock:tenant-" + string(w[:]) + ":job"
		}
	}
	series := func() (total int, patterns map[string]bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		patterns = map[string]bool{}
		for _, mf := range mfs {
			total += len(mf.GetMetric())
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "lock_pattern" {
						patterns[l.GetValue()] = true
					}
				}
			}
		}
		return total, patterns
	}
	var next atomic.Int64
	run := func(upTo int64) {
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range 32 {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= upTo || ctx.Err() != nil {
						return
					}
					if err := instrument.Do(ctx, gov, key(int(i)), func(context.Context) error { return nil },
						instrument.FailFast(), instrument.WithoutWatchdog()); err != nil {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if f := failed.Load(); f > 0 {
			t.Fatalf("%d of the cycles failed", f)
		}
	}
	run(n / 2)
	half, _ := series()
	run(n)
	total, patterns := series()
	t.Logf("%d distinct keys: %d series, %d lock_pattern values (MaxPatterns %d); %d series after %d keys",
		n, total, len(patterns), policy.Default().MaxPatterns, half, n/2)
	if total != half {
		t.Errorf("series grew with the keys: %d after %d keys, %d after %d", half, n/2, total, n)
	}
	if len(patterns) > policy.Default().MaxPatterns+1 {
		t.Errorf("%d lock_pattern values, want at most MaxPatterns+1 (%d)", len(patterns), policy.Default().MaxPatterns+1)
	}
	for p := range patterns {
		if strings.ContainsAny(p, "0123456789") && !strings.Contains(p, "{") {
			t.Errorf("a raw key as label value: %q", p)
		}
	}
}

// A 30-minute run's spans filled one shared budget before the registry's
// exposition, recorded at the end, got a byte: each kind has its own.
func TestCapture_EachKindHasItsOwnBudget(t *testing.T) {
	dir := t.TempDir()
	c, err := soak.NewCapture(filepath.Join(dir, "capture.txt"), 64)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		c.Record("span", []byte(`name="acquire lock" lockgov.key="lock:x"`))
	}
	c.Record("metrics", []byte(`x{a="b"} 1`))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	seen, dropped := c.Records()
	if seen["span"] != 100 || dropped["span"] == 0 || dropped["span"] >= 100 {
		t.Errorf("spans: seen %d dropped %d, want 100 seen and some but not all dropped", seen["span"], dropped["span"])
	}
	if seen["metrics"] != 1 || dropped["metrics"] != 0 {
		t.Errorf("metrics: seen %d dropped %d, want it written although spans filled theirs", seen["metrics"], dropped["metrics"])
	}
	data, err := os.ReadFile(filepath.Join(dir, "capture.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "metrics\tx{a=\"b\"} 1\n") {
		t.Errorf("capture lacks the metrics record:\n%s", data)
	}
}
