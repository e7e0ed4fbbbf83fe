package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fence/redisfence"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// The suite's knobs: LOCKGOV_CHAOS_LONG=1 injects every repeated fault ten
// times as often (more operations per fault); LOCKGOV_CHAOS_DIR keeps
// failure artefacts and appends each scenario's report line to report.txt
// there.
const (
	longEnv = "LOCKGOV_CHAOS_LONG"
	dirEnv  = "LOCKGOV_CHAOS_DIR"
)

// phase is how long a fault lasts.
func phase(d time.Duration) time.Duration { return d }

// rounds is how many times a repeated fault is injected: n in the short
// form, 10 n in the long.
func rounds(n int) int {
	if os.Getenv(longEnv) != "" {
		return 10 * n
	}
	return n
}

func artefactDir(t *testing.T) string {
	if d := os.Getenv(dirEnv); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

var reportMu sync.Mutex

// run drives one scenario: start the workload, wait for progress, run the
// nemesis (which injects and heals its faults), wait for progress again
// (the system recovered), stop, and check the history.
func run(t *testing.T, cfg Config, opts CheckOptions, nemesis func(ctx context.Context, w *Workload, h *History)) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := NewHistory()
	w, err := Start(ctx, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			w.Stop()
		}
	}
	defer stop()
	if err := w.WaitAccepted(ctx, 5); err != nil {
		t.Fatalf("no progress before the fault: %v (acquire errors %v)", err, w.AcquireErrors())
	}
	began := time.Now()
	nemesis(ctx, w, h)
	healed := time.Now()
	if err := w.WaitAccepted(ctx, 5); err != nil {
		t.Fatalf("no progress after the fault healed: %v (acquire errors %v)", err, w.AcquireErrors())
	}
	recovered := time.Now()
	stop()
	t.Logf("fault phase %v, recovery %v, stop %v", healed.Sub(began).Round(time.Millisecond),
		recovered.Sub(healed).Round(time.Millisecond), time.Since(recovered).Round(time.Millisecond))
	opts.Dir = artefactDir(t)
	r := Check(t.Name(), h, opts)
	t.Logf("%v; acquire errors %v", r, w.AcquireErrors())
	if d := os.Getenv(dirEnv); d != "" {
		reportMu.Lock()
		if f, err := os.OpenFile(filepath.Join(d, "report.txt"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, r.String())
			_ = f.Close()
		}
		reportMu.Unlock()
	}
	if !r.OK() {
		t.Errorf("promise broken: %v", r)
	}
	return r
}

// lockClient is a Redis client for a lock, with timeouts short enough that
// a fault shows within a TTL.
func lockClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           300 * time.Millisecond,
		ReadTimeout:           500 * time.Millisecond,
		WriteTimeout:          500 * time.Millisecond,
		MaxRetries:            1,
		PoolSize:              4,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisLocker is a governed redislock on c; the raw Locker is closed when
// the test ends.
func redisLocker(t *testing.T, c redis.UniversalClient, gopts ...instrument.Option) instrument.Locker {
	raw, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	g, err := instrument.NewGoverned(raw, gopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() }) // its heartbeat, before the client closes
	return g
}

func redisResource(t *testing.T, addr, key string) RedisResource {
	fw, err := redisfence.New(lockClient(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	return RedisResource{W: fw, Key: key}
}

// redisSetup is a lock Redis behind a fault proxy and a resource Redis
// that the faults do not touch.
type redisSetup struct {
	lock  *testenv.Redis
	proxy *testenv.Proxy
	res   *testenv.Redis
}

func newRedisSetup(t *testing.T) *redisSetup {
	s := &redisSetup{lock: testenv.NewRedis(t), res: testenv.NewRedis(t)}
	s.proxy = testenv.NewProxy(t, s.lock.Addr())
	return s
}

const (
	lockKey     = "lock:chaos:{acct-1}"
	resourceKey = "acct:{acct-1}"
	nClients    = 4
)

// config is n clients, each with its own lock and resource connections.
func (s *redisSetup) config(t *testing.T, ttl time.Duration, gopts ...instrument.Option) Config {
	cfg := Config{Key: lockKey, TTL: ttl, Work: ttl / 20, Reader: redisResource(t, s.res.Addr(), resourceKey)}
	for range nClients {
		cfg.Clients = append(cfg.Clients, Client{
			Locker:   redisLocker(t, lockClient(t, s.proxy.Addr()), gopts...),
			Resource: redisResource(t, s.res.Addr(), resourceKey),
		})
	}
	return cfg
}

// hold waits d or until ctx ends: how long a fault lasts.
func hold(ctx context.Context, d time.Duration) { pace(ctx, d) }
