package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// pairFunc is one acquire + release of a free key.
type pairFunc func(ctx context.Context) error

// lockImpl is one library in the uncontended table. prepare builds n pair functions, one per
// goroutine, each on its own key, sharing one client (as one service instance would), and a
// cleanup.
type lockImpl struct {
	name    string
	floor   bool // the raw pair the others are compared with
	etcd    bool // the server is etcd (its CPU from the etcd child), not redis-server
	prepare func(e *env, n int) ([]pairFunc, func(), error)
}

// rawRelease is the compare-and-delete every blog post shows.
var rawRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

const (
	nameRaw      = "raw go-redis SET NX PX + EVALSHA"
	nameBare     = "lockgov redislock (bare)"
	nameGoverned = "lockgov redislock + Govern"
	nameGovNoTr  = "lockgov redislock + Govern, no tracer"
	nameRawSpans = "raw pair + two OTel SDK spans"
	nameBSM      = "bsm/redislock"
	nameRedsync  = "redsync"
	nameEtcdMu   = "etcd concurrency.Mutex"
	nameEtcdlock = "lockgov etcdlock"
)

// newRedis is a client of its own; every connection it opens (the pool's, and the pub/sub
// connections lockgov's waiters subscribe on) is counted in e.dials.
func newRedis(e *env) *redis.Client {
	var d net.Dialer
	return redis.NewClient(&redis.Options{Addr: e.redisAddr, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			e.dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}})
}

func keyFor(prefix string, i int) string { return fmt.Sprintf("lock:bench:%s:%d", prefix, i) }

// discardExporter receives the governed spans through a batch span processor, as an OTLP
// exporter would, and drops them.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []trace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                          { return nil }

func lockImpls() []lockImpl {
	lockgovPairs := func(l instrument.Locker, prefix string, n int) []pairFunc {
		fs := make([]pairFunc, n)
		for i := range fs {
			key := keyFor(prefix, i)
			fs[i] = func(ctx context.Context) error {
				lease, err := l.Acquire(ctx, key, instrument.FailFast())
				if err != nil {
					return err
				}
				return lease.Release(ctx)
			}
		}
		return fs
	}
	return []lockImpl{
		{name: nameRaw, floor: true, prepare: func(e *env, n int) ([]pairFunc, func(), error) {
			c := newRedis(e)
			if err := rawRelease.Load(context.Background(), c).Err(); err != nil {
				return nil, nil, err
			}
			fs := make([]pairFunc, n)
			for i := range fs {
				key, tok := keyFor("raw", i), fmt.Sprintf("6f1c1f4e-3c4d-4a52-9b8e-%012d", i)
				fs[i] = func(ctx context.Context) error {
					ok, err := c.SetNX(ctx, key, tok, 30*time.Second).Result()
					if err != nil {
						return err
					}
					if !ok {
						return errors.New("raw: key held")
					}
					return rawRelease.Run(ctx, c, []string{key}, tok).Err()
				}
			}
			return fs, func() { _ = c.Close() }, nil
		}},
		{name: nameRawSpans, prepare: func(e *env, n int) ([]pairFunc, func(), error) {
			// The raw pair inside the two spans Govern records, on the same kind of provider,
			// with as many attributes: what the SDK alone costs, without lockgov. Govern's
			// distance from this row is lockgov's; this row's distance from raw is the SDK's.
			c := newRedis(e)
			if err := rawRelease.Load(context.Background(), c).Err(); err != nil {
				return nil, nil, err
			}
			tp := trace.NewTracerProvider(trace.WithBatcher(discardExporter{}))
			tr := tp.Tracer("bench")
			client := oteltrace.WithSpanKind(oteltrace.SpanKindClient)
			fs := make([]pairFunc, n)
			for i := range fs {
				key, tok := keyFor("rawspans", i), fmt.Sprintf("6f1c1f4e-3c4d-4a52-9b8e-%012d", i)
				fs[i] = func(ctx context.Context) error {
					actx, span := tr.Start(ctx, "acquire lock", client)
					ok, err := c.SetNX(actx, key, tok, 30*time.Second).Result()
					span.SetAttributes(attribute.String("lock.key_pattern", "lock:bench:{x}"), attribute.String("lock.backend", "redis"),
						attribute.String("lock.wait_strategy", "fail_fast"), attribute.String("db.system.name", "redis"),
						attribute.Int("lock.attempts", 1), attribute.Int64("lock.fence", 1), attribute.Bool("lock.degraded", false))
					span.End()
					if err != nil {
						return err
					}
					if !ok {
						return errors.New("raw: key held")
					}
					rctx, span := tr.Start(ctx, "release lock", client)
					span.SetAttributes(attribute.String("lock.key_pattern", "lock:bench:{x}"), attribute.String("lock.backend", "redis"),
						attribute.Int64("lock.fence", 1), attribute.String("db.system.name", "redis"))
					err = rawRelease.Run(rctx, c, []string{key}, tok).Err()
					span.End()
					return err
				}
			}
			return fs, func() { _ = tp.Shutdown(context.Background()); _ = c.Close() }, nil
		}},
		{name: nameBare, prepare: func(e *env, n int) ([]pairFunc, func(), error) {
			c := newRedis(e)
			l, err := redislock.New(c)
			if err != nil {
				return nil, nil, err
			}
			return lockgovPairs(l, "bare", n), func() { _ = c.Close() }, nil
		}},
		{name: nameGoverned, prepare: func(e *env, n int) ([]pairFunc, func(), error) {
			c := newRedis(e)
			l, err := redislock.New(c)
			if err != nil {
				return nil, nil, err
			}
			tp := trace.NewTracerProvider(trace.WithBatcher(discardExporter{}))
			g, err := instrument.NewGoverned(l, instrument.WithTracerProvider(tp),
				instrument.WithRegisterer(prometheus.NewRegistry()))
			if err != nil {
				return nil, nil, err
			}
			return lockgovPairs(g, "governed", n), func() {
				_ = g.Close()
				_ = tp.Shutdown(context.Background())
				_ = c.Close()
			}, nil
		}},
		{name: nameGovNoTr, prepare: func(e *env, n int) ([]pairFunc, func(), error) {
			// Govern with the global (no-op) tracer provider: what the spans cost is the
			// difference from the row above.
			c := newRedis(e)
			l, err := redislock.New(c)
			if err != nil {
				return nil, nil, err
			}
			g, err := instrument.NewGoverned(l, instrument.WithRegisterer(prometheus.NewRegistry()))
			if err != nil {
				return nil, nil, err
			}
			return lockgovPairs(g, "governed-notracer", n), func() { _ = g.Close(); _ = c.Close() }, nil
		}},
		{name: nameBSM, prepare: func(e *env, n int) ([]pairFunc, func(), error) {
			c := newRedis(e)
			cl := bsm.New(c)
			fs := make([]pairFunc, n)
			for i := range fs {
				key := keyFor("bsm", i)
				fs[i] = func(ctx context.Context) error {
					lock, err := cl.Obtain(ctx, key, 30*time.Second, nil)
					if err != nil {
						return err
					}
					return lock.Release(ctx)
				}
			}
			return fs, func() { _ = c.Close() }, nil
		}},
		{name: nameRedsync, prepare: func(e *env, n int) ([]pairFunc, func(), error) {
			c := newRedis(e)
			rs := redsync.New(goredis.NewPool(c))
			fs := make([]pairFunc, n)
			for i := range fs {
				m := rs.NewMutex(keyFor("redsync", i)) // a Mutex is one goroutine's
				fs[i] = func(ctx context.Context) error {
					if err := m.LockContext(ctx); err != nil {
						return err
					}
					_, err := m.UnlockContext(ctx)
					return err
				}
			}
			return fs, func() { _ = c.Close() }, nil
		}},
		{name: nameEtcdMu, etcd: true, prepare: func(e *env, n int) ([]pairFunc, func(), error) {
			s, closeSession, err := e.etcdSession()
			if err != nil {
				return nil, nil, err
			}
			fs := make([]pairFunc, n)
			for i := range fs {
				m := concurrency.NewMutex(s, "/bench/mutex/"+keyFor("u", i))
				fs[i] = func(ctx context.Context) error {
					if err := m.Lock(ctx); err != nil {
						return err
					}
					return m.Unlock(ctx)
				}
			}
			return fs, closeSession, nil
		}},
		{name: nameEtcdlock, etcd: true, prepare: func(e *env, n int) ([]pairFunc, func(), error) {
			cli, err := e.etcdClient()
			if err != nil {
				return nil, nil, err
			}
			l, err := etcdlock.New(cli)
			if err != nil {
				_ = cli.Close()
				return nil, nil, err
			}
			return lockgovPairs(l, "etcdlock", n), func() { _ = cli.Close() }, nil
		}},
	}
}

// lockRow is one library at one concurrency: medians over the rounds.
type lockRow struct {
	name       string
	goroutines int
	floor      bool
	opsPerSec  float64
	p50, p99   float64 // µs
	allocs     float64 // per pair, whole process
	cpu        float64 // µs per pair, whole process
	server     float64 // µs per pair, the server's CPU (redis-server's or the etcd child's)
	ratio      float64 // throughput / the floor's, in the same round
	cpuRatio   float64 // cpu / the floor's, in the same round
	rounds     []lockRound
}

type lockRound struct {
	ops      int
	wall     time.Duration
	lat      []time.Duration // sorted
	allocs   float64
	cpu      time.Duration // per pair
	server   time.Duration // redis-server's CPU per pair
	opsPerS  float64
	ratio    float64
	cpuRatio float64
}

// measurePairs runs every pair function on its own goroutine for d and measures the lot.
func measurePairs(ctx context.Context, fs []pairFunc, d time.Duration, serverCPU func() time.Duration) (lockRound, error) {
	runCtx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	// Warm up: script cache, connection pool, lease reuse.
	for _, f := range fs {
		if err := f(runCtx); err != nil {
			return lockRound{}, err
		}
	}
	lats := make([][]time.Duration, len(fs))
	errs := make([]error, len(fs))
	for i := range lats {
		lats[i] = make([]time.Duration, 0, 1<<14)
	}
	// Every case starts from a collected heap, as testing.B does before each run: the garbage
	// the case before left (the etcd rows allocate ~30x more per pair than the Redis ones) is
	// otherwise collected during this one, on its CPU and time (measured, `-only locks`, one
	// run each: the governed pair 0.76x -> 0.86x raw, its client CPU 1.29x -> 1.12x raw's).
	runtime.GC()
	var wg sync.WaitGroup
	s0 := serverCPU()
	m0, c0, t0 := mallocs(), cpuTime(), time.Now()
	end := t0.Add(d)
	for i, f := range fs {
		wg.Go(func() {
			for {
				s := time.Now()
				if !s.Before(end) {
					return
				}
				if err := f(runCtx); err != nil {
					errs[i] = err
					return
				}
				lats[i] = append(lats[i], time.Since(s))
			}
		})
	}
	wg.Wait()
	wall, cpu, allocs := time.Since(t0), cpuTime()-c0, mallocs()-m0
	server := serverCPU() - s0
	if err := errors.Join(errs...); err != nil {
		return lockRound{}, err
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	r := lockRound{ops: len(all), wall: wall, lat: all}
	if r.ops > 0 {
		r.opsPerS = float64(r.ops) / wall.Seconds()
		r.allocs = float64(allocs) / float64(r.ops)
		r.cpu = cpu / time.Duration(r.ops)
		r.server = server / time.Duration(r.ops)
	}
	return r, nil
}

func runUncontended(ctx context.Context, e *env, cfg config, out io.Writer) ([]lockRow, error) {
	if e.etcdCPU == nil {
		return nil, errors.New("uncontended: no reader of the etcd server's CPU (run starts etcd in a child process and sets one)")
	}
	impls := lockImpls()
	admin := redis.NewClient(&redis.Options{Addr: e.redisAddr})
	defer admin.Close()
	var infoErr, etcdErr error
	serverCPU := func() time.Duration {
		d, err := testenv.RedisCPU(ctx, admin)
		if err != nil && infoErr == nil {
			infoErr = err
		}
		return d
	}
	etcdCPU := func() time.Duration {
		d, err := e.etcdCPU()
		if err != nil && etcdErr == nil {
			etcdErr = err
		}
		return d
	}
	var rows []lockRow
	for _, g := range []int{1, 16} {
		byName := map[string]*lockRow{}
		for _, im := range impls {
			rows = append(rows, lockRow{name: im.name, goroutines: g, floor: im.floor})
		}
		for i := range rows {
			if rows[i].goroutines == g {
				byName[rows[i].name] = &rows[i]
			}
		}
		for round := range cfg.rounds {
			got := map[string]lockRound{}
			for _, im := range roundOrder(impls, round) {
				fs, cleanup, err := im.prepare(e, g)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", im.name, err)
				}
				srv := serverCPU
				if im.etcd {
					srv = etcdCPU
				}
				r, err := measurePairs(ctx, fs, cfg.lockDur, srv)
				cleanup()
				if err != nil {
					return nil, fmt.Errorf("%s, %d goroutines: %w", im.name, g, err)
				}
				got[im.name] = r
			}
			floor := got[nameRaw]
			for name, r := range got {
				if floor.opsPerS > 0 {
					r.ratio = r.opsPerS / floor.opsPerS
				}
				if floor.cpu > 0 {
					r.cpuRatio = float64(r.cpu) / float64(floor.cpu)
				}
				byName[name].rounds = append(byName[name].rounds, r)
			}
			fmt.Fprintf(out, "  %2d goroutines, round %d: ", g, round+1)
			for _, im := range impls {
				fmt.Fprintf(out, "%s %.0f/s  ", short(im.name), got[im.name].opsPerS)
			}
			fmt.Fprintln(out)
		}
	}
	if infoErr != nil {
		return nil, fmt.Errorf("redis-server CPU (INFO cpu): %w", infoErr)
	}
	if etcdErr != nil {
		return nil, etcdErr
	}
	for i := range rows {
		summarizeLockRow(&rows[i])
	}
	return rows, nil
}

func summarizeLockRow(r *lockRow) {
	var tput, p50, p99, allocs, cpu, server, ratio, cpuRatio []float64
	for _, x := range r.rounds {
		tput = append(tput, x.opsPerS)
		p50 = append(p50, us(quantile(x.lat, 0.50)))
		p99 = append(p99, us(quantile(x.lat, 0.99)))
		allocs = append(allocs, x.allocs)
		cpu = append(cpu, us(x.cpu))
		server = append(server, us(x.server))
		ratio = append(ratio, x.ratio)
		cpuRatio = append(cpuRatio, x.cpuRatio)
	}
	r.opsPerSec, r.p50, r.p99 = median(tput), median(p50), median(p99)
	r.allocs, r.cpu, r.server, r.ratio, r.cpuRatio = median(allocs), median(cpu), median(server), median(ratio), median(cpuRatio)
}

// short is a library's name in the progress lines.
func short(name string) string {
	switch name {
	case nameRaw:
		return "raw"
	case nameBare:
		return "bare"
	case nameGoverned:
		return "governed"
	case nameGovNoTr:
		return "gov-notracer"
	case nameRawSpans:
		return "raw+spans"
	case nameEtcdMu:
		return "etcd-mutex"
	case nameEtcdlock:
		return "etcdlock"
	}
	return name
}
