package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/agent"
)

// Config is one load run.
type Config struct {
	// RedisAddr is the redis-server the run uses (host:port).
	RedisAddr string
	// Clients lock clients each run OpsPerClient acquire/hold/release
	// cycles on Keys lock keys; with Duration set they run until it has
	// passed instead.
	Clients, OpsPerClient, Keys int
	Duration                    time.Duration
	// IdempotencyClients and QuotaClients run Store.Do and Deduct until
	// the lock clients are done.
	IdempotencyClients, QuotaClients int
	// Dir holds the capture and token files.
	Dir string
	// MaxCaptureBytes caps what the capture file holds of each kind (0: no
	// cap): spans fill their own share, never the exposition's or the logs'.
	MaxCaptureBytes int64
	// Agent runs a lockgov agent on the same Redis and records its API
	// answers; AgentPoll is how often (default 2s).
	Agent     bool
	AgentPoll time.Duration
	// SamplePeriod is how often goroutines and heap are read (default
	// 100ms).
	SamplePeriod time.Duration
	// Progress, when set, is told of progress now and then (the soak
	// script prints it).
	Progress func(string)
}

// Report is what a run measured.
type Report struct {
	Elapsed                      time.Duration
	Lock, Idempotency, Quota     KindStats
	Samples                      []Sample
	GoroutinesBefore             int // after setup, before the load
	GoroutinesAfter              int // after the load stopped and every lease ended
	HeapLiveAfter                uint64
	Tokens                       int              // distinct owner tokens collected from the lock handles
	Hits                         []Hit            // owner tokens found in the capture: must be none
	Lines                        map[string]int64 // capture lines scanned, by kind
	Records, Dropped             map[string]int64 // capture records, and those past the cap
	Series                       int              // series in the registry at the end
	BaselineWindow, FinalWindow  Window           // samples at 25-50% and 75-100% of the run
	Capture, TokensFile, Summary string
}

// Run runs the load and scans its outputs. The caller checks the report.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if cfg.Clients < 1 || cfg.Keys < 1 || (cfg.OpsPerClient < 1 && cfg.Duration <= 0) {
		return nil, fmt.Errorf("soak: want clients, keys and ops per client or a duration: %+v", cfg)
	}
	if cfg.AgentPoll <= 0 {
		cfg.AgentPoll = 2 * time.Second
	}
	if cfg.SamplePeriod <= 0 {
		cfg.SamplePeriod = 100 * time.Millisecond
	}
	say := cfg.Progress
	if say == nil {
		say = func(string) {}
	}
	rep = &Report{Capture: filepath.Join(cfg.Dir, "capture.txt"), TokensFile: filepath.Join(cfg.Dir, "tokens.txt")}
	capt, err := NewCapture(rep.Capture, cfg.MaxCaptureBytes)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, capt.Close()) }()
	tokFile, err := os.Create(rep.TokensFile)
	if err != nil {
		return nil, err
	}
	var tokMu sync.Mutex
	tokW := newLineWriter(tokFile)
	defer func() { err = errors.Join(err, tokW.close()) }()

	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, PoolSize: cfg.Clients + cfg.IdempotencyClients + cfg.QuotaClients + 16,
		ContextTimeoutEnabled: true, DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	defer func() { _ = rdb.Close() }()
	logger := slog.New(slog.NewTextHandler(capt.Writer("log"), &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(capt.SpanProcessor()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	rl, err := redislock.New(rdb)
	if err != nil {
		return nil, err
	}
	gov, err := instrument.NewGoverned(rl, instrument.WithRegisterer(reg), instrument.WithTracerProvider(tp),
		instrument.WithLogger(logger), instrument.WithHeartbeat(fleet.WithInterval(500*time.Millisecond), fleet.WithService("soak")))
	if err != nil {
		return nil, err
	}
	defer func() { _ = gov.Close() }()
	idem, err := idempotency.New(rdb, idempotency.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	q, err := quota.New(rdb, quota.WithRegisterer(reg), quota.WithShards(4))
	if err != nil {
		return nil, err
	}
	const quotaKeys = 16
	for i := range quotaKeys {
		if err := q.Set(ctx, "soak:quota:"+strconv.Itoa(i), 1<<40); err != nil {
			return nil, err
		}
	}
	var ag *agent.Agent
	if cfg.Agent {
		ag, err = agent.Start(ctx, agent.Config{Redis: []string{"redis://" + cfg.RedisAddr}, Listen: "127.0.0.1:0",
			// ScanTimeout is at most Interval: 5s leaves room for a scan
			// under -race on a loaded machine.
			Interval: 5 * time.Second, ID: "soak-agent", Logger: logger, Stdout: io.Discard})
		if err != nil {
			return nil, fmt.Errorf("start agent: %w", err)
		}
		defer func() { _ = ag.Close() }()
	}
	keys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = "lock:soak:" + strconv.Itoa(i)
	}

	// Progress: the share of lock cycles done, or of the duration passed.
	total := uint64(cfg.Clients) * uint64(max(cfg.OpsPerClient, 0))
	var done atomic.Uint64
	start := time.Now()
	progress := func() float64 {
		if cfg.Duration > 0 {
			return min(float64(time.Since(start))/float64(cfg.Duration), 1)
		}
		return min(float64(done.Load())/float64(total), 1)
	}
	runtime.GC()
	rep.GoroutinesBefore = runtime.NumGoroutine()
	smp := startSampler(cfg.SamplePeriod, progress)
	sampling := true
	defer func() {
		if sampling {
			smp.finish()
		}
	}()

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var lockLat, idemLat, quotaLat Latency
	var wg, side sync.WaitGroup
	var firstErr atomic.Value
	noteErr := func(kind string, err error) {
		if err != nil && firstErr.Load() == nil {
			firstErr.CompareAndSwap(nil, kind+": "+err.Error())
		}
	}
	for c := range cfg.Clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for i := 0; cfg.Duration > 0 || i < cfg.OpsPerClient; i++ {
				if loadCtx.Err() != nil || (cfg.Duration > 0 && time.Since(start) >= cfg.Duration) {
					return
				}
				key := keys[rng.IntN(len(keys))]
				t0 := time.Now()
				tok, err := lockCycle(loadCtx, gov, rdb, key)
				lockLat.Observe(time.Since(t0), err)
				noteErr("lock", err)
				if tok != "" {
					tokMu.Lock()
					tokW.line(tok)
					tokMu.Unlock()
				}
				done.Add(1)
			}
		})
	}
	for c := range cfg.IdempotencyClients {
		side.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 2))
			for loadCtx.Err() == nil {
				key := "soak-" + strconv.Itoa(rng.IntN(2000))
				t0 := time.Now()
				octx, cancel := context.WithTimeout(loadCtx, 10*time.Second)
				_, err := idem.Do(octx, key, []byte(key), func(context.Context, idempotency.Attempt) ([]byte, error) {
					return []byte("done " + key), nil
				})
				cancel()
				if loadCtx.Err() != nil {
					return // cancelled by the end of the load, not an error of the store
				}
				idemLat.Observe(time.Since(t0), err)
				noteErr("idempotency", err)
			}
		})
	}
	for c := range cfg.QuotaClients {
		side.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 3))
			for i := 0; loadCtx.Err() == nil; i++ {
				key := "soak:quota:" + strconv.Itoa(rng.IntN(quotaKeys))
				t0 := time.Now()
				octx, cancel := context.WithTimeout(loadCtx, 10*time.Second)
				_, err := q.Deduct(octx, key, 1, "soak-"+strconv.Itoa(c)+"-"+strconv.Itoa(i))
				cancel()
				if loadCtx.Err() != nil {
					return
				}
				quotaLat.Observe(time.Since(t0), err)
				noteErr("quota", err)
			}
		})
	}
	// The observers: heartbeat values in Redis every 500ms, the agent's
	// API every AgentPoll, progress every 10s.
	every := func(d time.Duration, f func()) {
		side.Go(func() {
			t := time.NewTicker(d)
			defer t.Stop()
			for {
				select {
				case <-loadCtx.Done():
					return
				case <-t.C:
				}
				f()
			}
		})
	}
	var hbKeys []string
	var hbTick int
	every(500*time.Millisecond, func() {
		// The heartbeat keys are found by SCAN every 10s (the keyspace
		// grows with quota request records) and read every 500ms.
		if hbTick%20 == 0 || len(hbKeys) == 0 {
			hbKeys = heartbeatKeys(loadCtx, rdb)
		}
		hbTick++
		recordHeartbeats(loadCtx, rdb, hbKeys, capt)
	})
	if ag != nil {
		every(cfg.AgentPoll, func() { recordAPI(loadCtx, ag.URL(), capt) })
	}
	side.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		lastSay := time.Now()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-t.C:
			}
			if time.Since(lastSay) >= 10*time.Second {
				say(fmt.Sprintf("%3.0f%%  lock ops %d (errors %d)  goroutines %d", 100*progress(), lockLat.n.Load(),
					lockLat.err.Load(), runtime.NumGoroutine()))
				lastSay = time.Now()
			}
		}
	})
	wg.Wait()
	stopLoad()
	side.Wait()
	rep.Elapsed = time.Since(start)
	smp.take(1) // the end of the load
	rep.Samples = smp.finish()
	sampling = false
	rep.Lock, rep.Idempotency, rep.Quota = lockLat.stats(), idemLat.stats(), quotaLat.stats()
	if v := firstErr.Load(); v != nil {
		say("first error: " + v.(string))
	}

	// What the process holds once the load is gone: every lease ended (each
	// cycle releases before it returns), goroutines back to where they were.
	rep.GoroutinesAfter = settleGoroutines(ctx, rep.GoroutinesBefore)
	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	rep.HeapLiveAfter = live[0].Value.Uint64()
	rep.BaselineWindow, rep.FinalWindow = window(rep.Samples, 0.25, 0.5), window(rep.Samples, 0.75, 1.01)

	// The last outputs: the registry, the agent, the heartbeats.
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	mfs, err := reg.Gather()
	if err != nil {
		return rep, fmt.Errorf("gather: %w", err)
	}
	var sb strings.Builder
	enc := expfmt.NewEncoder(&sb, expfmt.NewFormat(expfmt.TypeOpenMetrics)) // with exemplars
	for _, mf := range mfs {
		rep.Series += len(mf.GetMetric())
		if err := enc.Encode(mf); err != nil {
			return rep, err
		}
	}
	capt.Record("metrics", []byte(sb.String()))
	if ag != nil {
		recordAPI(fctx, ag.URL(), capt)
	}
	recordHeartbeats(fctx, rdb, heartbeatKeys(fctx, rdb), capt)
	_ = tp.ForceFlush(fctx)
	rep.Records, rep.Dropped = capt.Records()
	if err := capt.Close(); err != nil {
		return rep, err
	}
	tokMu.Lock()
	err = tokW.close()
	tokMu.Unlock()
	if err != nil {
		return rep, err
	}

	toks, err := LoadTokens(rep.TokensFile)
	if err != nil {
		return rep, err
	}
	rep.Tokens = toks.Len()
	f, err := os.Open(rep.Capture)
	if err != nil {
		return rep, err
	}
	defer func() { _ = f.Close() }()
	rep.Hits, rep.Lines, err = toks.Scan(f)
	rep.Summary = rep.summarise()
	return rep, err
}

// lockCycle acquires key through the governed Locker, holds it while it
// reads the lock's value (the owner token is its first field: the handle
// does not expose it, so the value the handle's fence names is read), and
// releases it. It returns the token.
func lockCycle(ctx context.Context, l instrument.Locker, rdb *redis.Client, key string) (tok string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		return "", err
	}
	defer func() {
		if rerr := lease.Release(ctx); err == nil {
			err = rerr
		}
	}()
	v, err := rdb.Get(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("read the held lock: %w", err)
	}
	tok, rest, _ := strings.Cut(v, " ")
	fence, _, _ := strings.Cut(rest, " ")
	if fence != strconv.FormatUint(lease.Fence(), 10) {
		return "", fmt.Errorf("the value of held %s has fence %q, the handle %d", key, fence, lease.Fence())
	}
	return tok, nil
}

// settleGoroutines waits (up to a minute, polling) for the goroutine count
// to come back to before (plus a few for the runtime and the pool), and
// returns the last count.
func settleGoroutines(ctx context.Context, before int) int {
	deadline := time.Now().Add(time.Minute)
	for {
		n := runtime.NumGoroutine()
		if n <= before+4 || time.Now().After(deadline) || ctx.Err() != nil {
			return n
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond): // polling a condition, with the deadline above
		}
	}
}

func heartbeatKeys(ctx context.Context, rdb *redis.Client) []string {
	var keys []string
	iter := rdb.Scan(ctx, 0, fleet.RedisPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys
}

func recordHeartbeats(ctx context.Context, rdb *redis.Client, keys []string, capt *Capture) {
	for _, k := range keys {
		v, err := rdb.Get(ctx, k).Bytes()
		if err == nil {
			capt.Record("heartbeat", append([]byte(k+" "), v...))
		}
	}
}

// apiClient keeps no idle connections, so none is left (with its
// goroutines) when the run counts its goroutines.
var apiClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

var apiPaths = []string{"/api/v1/findings", "/api/v1/locks", "/api/v1/instances", "/metrics", "/readyz"}

func recordAPI(ctx context.Context, base string, capt *Capture) {
	for _, p := range apiPaths {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+p, nil)
		if err != nil {
			continue
		}
		resp, err := apiClient.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		_ = resp.Body.Close()
		capt.Record("api", append([]byte(p+" "), body...))
	}
}

// summarise is the report as the soak script prints it and
// docs/RELIABILITY.md quotes it.
func (r *Report) summarise() string {
	var b strings.Builder
	kind := func(name string, k KindStats) {
		fmt.Fprintf(&b, "%-12s ops %8d  errors %d (%.4f%%)  p50 %v  p99 %v  max %v\n", name, k.Ops, k.Errors,
			100*k.ErrorRate(), k.P50, k.P99, k.Max.Round(time.Microsecond))
	}
	fmt.Fprintf(&b, "elapsed %v\n", r.Elapsed.Round(time.Millisecond))
	kind("lock", r.Lock)
	kind("idempotency", r.Idempotency)
	kind("quota", r.Quota)
	bw, fw := r.BaselineWindow, r.FinalWindow
	fmt.Fprintf(&b, "goroutines: before %d, 25-50%% max %d, 75-100%% max %d, after %d\n", r.GoroutinesBefore, bw.MaxGorout, fw.MaxGorout, r.GoroutinesAfter)
	fmt.Fprintf(&b, "heap live: 25-50%% max %.1f MB, 75-100%% min %.1f MB max %.1f MB, after the run (GC) %.1f MB (%d samples)\n",
		mb(bw.MaxHeapLive), mb(fw.MinHeapLive), mb(fw.MaxHeapLive), mb(r.HeapLiveAfter), len(r.Samples))
	fmt.Fprintf(&b, "owner tokens: %d collected, %d found in the capture\n", r.Tokens, len(r.Hits))
	fmt.Fprintf(&b, "capture lines scanned:")
	for _, k := range sortedKeys(r.Lines) {
		fmt.Fprintf(&b, " %s %d", k, r.Lines[k])
	}
	for _, k := range sortedKeys(r.Dropped) {
		fmt.Fprintf(&b, " (%s: %d records past the capture cap, not scanned)", k, r.Dropped[k])
	}
	fmt.Fprintf(&b, "\nregistry series: %d\n", r.Series)
	return b.String()
}

func mb(v uint64) float64 { return float64(v) / (1 << 20) }
