package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/agent"
)

// Config is what one demo runs with.
type Config struct {
	// Duration is how long the demo runs once the console URL is printed
	// (0: until ctx ends).
	Duration time.Duration
	// Listen is the console's address (default 127.0.0.1:0, a free port).
	Listen string
	// Interval is the agent's scan interval (default 2s).
	Interval time.Duration
	// RedisServer is the redis-server binary ("": looked up on PATH; none
	// found: no Redis half).
	RedisServer string
	// Stdout receives the console URL and the summary; Logger the rest.
	Stdout io.Writer
	Logger *slog.Logger
}

// Summary is what the agent found at the end, by finding kind.
type Summary struct {
	Findings map[string]int
	Redis    bool // the Redis half ran
}

const (
	beatPeriod  = time.Second
	skewOffset  = 700 * time.Millisecond
	opTimeout   = 2 * time.Second
	stopTimeout = 4 * time.Second
)

// Run runs the demo until ctx ends or cfg.Duration passes, then removes
// everything it started and returns what the agent found.
func Run(ctx context.Context, cfg Config) (sum Summary, err error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.Duration < 0 {
		return sum, fmt.Errorf("--duration %v: want >= 0", cfg.Duration)
	}
	tmp, err := os.MkdirTemp("", "lockgov-demo-")
	if err != nil {
		return sum, err
	}
	defer os.RemoveAll(tmp)

	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()

	var redisURL string
	bin := cfg.RedisServer
	if bin == "" {
		bin, _ = exec.LookPath("redis-server")
	}
	if bin != "" {
		addr, stop, err := startRedis(bin, filepath.Join(tmp, "redis"))
		if err != nil {
			return sum, err
		}
		cleanups = append(cleanups, stop)
		redisURL = "redis://" + addr
		sum.Redis = true
	}
	ports, err := freePorts(2)
	if err != nil {
		return sum, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	acfg := agent.Config{
		Listen: cfg.Listen, Interval: cfg.Interval, ID: "lockgov-demo",
		DataDir: filepath.Join(tmp, "etcd"), EmbedClientURL: etcdURL, EmbedPeerURL: "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		EmbedEtcd: true, Logger: cfg.Logger, Stdout: io.Discard,
	}
	if redisURL != "" {
		acfg.Redis = []string{redisURL}
	}
	a, err := agent.Start(context.WithoutCancel(ctx), acfg)
	if err != nil {
		return sum, err
	}
	cleanups = append(cleanups, func() { _ = a.Close() })

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return sum, err
	}
	cleanups = append(cleanups, func() { _ = cli.Close() })
	var rdb *redis.Client
	if redisURL != "" {
		rdb = redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(redisURL, "redis://"), ContextTimeoutEnabled: true})
		cleanups = append(cleanups, func() { _ = rdb.Close() })
	}

	stopWork, err := StartWorkload(ctx, cli, rdb, cfg.Logger)
	if err != nil {
		return sum, err
	}
	cleanups = append(cleanups, stopWork)

	fmt.Fprintln(cfg.Stdout, a.URL())
	redisNote := "no redis-server on PATH: etcd only"
	if redisURL != "" {
		redisNote = "and a private Redis at " + redisURL
	}
	fmt.Fprintf(cfg.Stdout, "lockgov demo: agent and workload on an embedded etcd at %s, %s; open the console above (Ctrl-C stops)\n", etcdURL, redisNote)

	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	<-ctx.Done()
	sum.Findings = countFindings(a.URL())
	printSummary(cfg.Stdout, sum)
	return sum, nil
}

// countFindings reads the agent's last scan.
func countFindings(url string) map[string]int {
	out := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"api/v1/findings", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	var doc struct {
		Findings []struct{ Kind string }
	}
	if json.NewDecoder(resp.Body).Decode(&doc) == nil {
		for _, f := range doc.Findings {
			out[f.Kind]++
		}
	}
	return out
}

func printSummary(w io.Writer, sum Summary) {
	total := 0
	var kinds []string
	for k, n := range sum.Findings {
		total += n
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "lockgov demo: the agent found %d findings\n", total)
	for _, k := range kinds {
		fmt.Fprintf(w, "  %-22s %d\n", k, sum.Findings[k])
	}
}

func freePorts(n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// startRedis starts a private redis-server on a free port with its files in
// dir, and returns its address and how to stop it.
func startRedis(bin, dir string) (string, func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return "", nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	cmd := exec.Command(bin, "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--protected-mode", "no", "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr, stop, nil
		}
		select {
		case <-done:
			return "", nil, fmt.Errorf("redis-server exited at start (log in %s)", dir)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server on %s not answering: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a process start, not a synchronisation
	}
}

// StartWorkload starts the demo's workload (see the package doc) on the
// etcd of cli and, when rdb is not nil, on the Redis of rdb, until ctx ends
// or stop is called. stop ends it, releases its locks and waits for its
// goroutines. Run starts it on the servers it starts itself; a test starts
// it on servers of its own to get the state the demo shows (the findings
// it makes, their locks and heartbeats). logger receives its warnings.
func StartWorkload(ctx context.Context, cli *clientv3.Client, rdb *redis.Client, logger *slog.Logger) (stop func(), err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	work, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	w := &workload{cli: cli, rdb: rdb, log: logger}
	stop = func() {
		stopWork()
		wg.Wait()
		for _, g := range w.governed {
			_ = g.Close()
		}
	}
	if err := w.start(work, &wg); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// workload makes each kind of finding; see the package doc.
type workload struct {
	cli *clientv3.Client
	rdb *redis.Client
	log *slog.Logger

	governed []*instrument.Governed
}

func (w *workload) start(ctx context.Context, wg *sync.WaitGroup) error {
	// Contention through Govern.
	el, err := etcdlock.New(w.cli, etcdlock.WithService("checkout"), etcdlock.WithInstance("checkout-demo"))
	if err != nil {
		return err
	}
	raw := []instrument.Locker{el}
	if w.rdb != nil {
		rl, err := redislock.New(w.rdb, redislock.WithService("checkout"), redislock.WithInstance("checkout-demo"))
		if err != nil {
			return err
		}
		raw = append(raw, rl)
	}
	for _, r := range raw {
		g, err := instrument.NewGoverned(r, instrument.WithLogger(w.log),
			instrument.WithHeartbeat(fleet.WithInstance("checkout-demo"), fleet.WithService("checkout"), fleet.WithInterval(beatPeriod)))
		if err != nil {
			return err
		}
		w.governed = append(w.governed, g)
	}
	for _, l := range w.governed {
		for i := range 4 {
			wg.Go(func() { contend(ctx, l, i) })
		}
	}
	if err := w.immortal(ctx); err != nil {
		return err
	}
	return w.fleet(ctx, wg)
}

// contend takes one of three cart keys at a time and holds it briefly.
func contend(ctx context.Context, l instrument.Locker, worker int) {
	for ctx.Err() == nil {
		key := fmt.Sprintf("lock:demo:cart:%d", 1+(worker+rand.IntN(3))%3)
		actx, cancel := context.WithTimeout(ctx, opTimeout)
		_ = instrument.Do(actx, l, key, func(ctx context.Context) error {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(20+rand.IntN(80)) * time.Millisecond): // the work under the lock
			}
			return nil
		})
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(rand.IntN(50)) * time.Millisecond): // think time between orders
		}
	}
}

const immortalKey = "lock:demo:report:nightly"

// immortal writes a lock without expiry, as a job that died between SETNX
// and EXPIRE leaves it.
func (w *workload) immortal(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	val, _ := json.Marshal(map[string]any{"service": "nightly-report", "instance": "cron-7", "pid": 4242,
		"acquired_at_ms": time.Now().Add(-3 * time.Hour).UnixMilli()})
	if _, err := w.cli.Put(ctx, etcdlock.DefaultPrefix+immortalKey+"\x00000000000000beef", string(val)); err != nil {
		return fmt.Errorf("immortal lock on etcd: %w", err)
	}
	if w.rdb != nil {
		if err := w.rdb.Set(ctx, immortalKey, "legacy-cron-7", 0).Err(); err != nil {
			return fmt.Errorf("immortal lock on Redis: %w", err)
		}
	}
	return nil
}

// fleet takes the deadlocked pair's locks and publishes the made-up
// instances' heartbeats until ctx ends.
func (w *workload) fleet(ctx context.Context, wg *sync.WaitGroup) error {
	const apple, pear = "lock:demo:stock:apple", "lock:demo:stock:pear"
	la, err := etcdlock.New(w.cli, etcdlock.WithService("inventory"), etcdlock.WithInstance("inventory-a"))
	if err != nil {
		return err
	}
	lb, err := etcdlock.New(w.cli, etcdlock.WithService("inventory"), etcdlock.WithInstance("inventory-b"))
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	ha, err := la.Acquire(actx, apple, instrument.WithTTL(10*time.Second))
	if err != nil {
		return fmt.Errorf("deadlock pair: %w", err)
	}
	hb, err := lb.Acquire(actx, pear, instrument.WithTTL(10*time.Second))
	if err != nil {
		_ = ha.Release(context.Background())
		return fmt.Errorf("deadlock pair: %w", err)
	}
	since := time.Now()
	// Each waits for the other's key until the demo stops: a real deadlock.
	wait := func(l instrument.Locker, key string, held instrument.Lease) {
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			_ = held.Release(rctx)
			cancel()
		}()
		// Never granted while the other side holds key: this waits until
		// the demo's context ends. Do releases it should it be granted.
		_ = instrument.Do(ctx, l, key, func(context.Context) error { return nil }, instrument.WithTTL(10*time.Second))
	}
	wg.Go(func() { wait(la, pear, ha) })
	wg.Go(func() { wait(lb, apple, hb) })

	held := func(key string, l instrument.Lease) []fleet.HeldLock {
		return []fleet.HeldLock{{Key: key, Pattern: "lock:demo:stock:{id}", Backend: "etcd", Fence: l.Fence(), Since: since}}
	}
	waiting := func(key, holds string) []fleet.WaitingLock {
		return []fleet.WaitingLock{{Key: key, Pattern: "lock:demo:stock:{id}", Backend: "etcd", Since: since, HoldsWhileWaiting: []string{holds}}}
	}
	started := time.Now()
	beats := func(now time.Time) []*fleet.Heartbeat {
		base := func(inst, svc string, clock time.Time) *fleet.Heartbeat {
			return &fleet.Heartbeat{Instance: inst, Service: svc, Version: "demo", Host: "demo-host", PID: os.Getpid(),
				StartedAt: started, SentAt: clock, Interval: beatPeriod}
		}
		skewed := base("billing-skewed", "billing", now.Add(skewOffset))
		skewed.Clock = &fleet.ClockSample{Offset: skewOffset, RTT: time.Millisecond, MeasuredAt: now.Add(skewOffset), Source: fleet.ClockSourceStore}
		skewed.Tier = "reject"
		oa, ob := base("orders-a", "orders", now), base("orders-b", "orders", now)
		oa.WorkerIDs = []fleet.WorkerID{{Service: "orders", ID: 7}}
		ob.WorkerIDs = []fleet.WorkerID{{Service: "orders", ID: 7}}
		ia, ib := base("inventory-a", "inventory", now), base("inventory-b", "inventory", now)
		ia.Held, ia.Waiting = held(apple, ha), waiting(pear, apple)
		ib.Held, ib.Waiting = held(pear, hb), waiting(apple, pear)
		return []*fleet.Heartbeat{skewed, oa, ob, ia, ib}
	}
	beatTTL := int64(3 * beatPeriod / time.Second)
	lease, err := w.cli.Grant(actx, beatTTL)
	if err != nil {
		return err
	}
	leaseID := lease.ID // publish's goroutine alone uses it after the first publish
	publish := func() error {
		pctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		if _, err := w.cli.KeepAliveOnce(pctx, leaseID); errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The demo was held up past the lease's TTL (a loaded
			// machine), and the beats went with it: publish them under a
			// new lease, or the made-up instances would stay gone.
			l, err := w.cli.Grant(pctx, beatTTL)
			if err != nil {
				return err
			}
			leaseID = l.ID
		} else if err != nil {
			return err
		}
		for _, b := range beats(time.Now()) {
			v, err := fleet.Encode(b)
			if err != nil {
				return err
			}
			if _, err := w.cli.Put(pctx, fleet.EtcdKey(b.Instance), string(v), clientv3.WithLease(leaseID)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := publish(); err != nil {
		return fmt.Errorf("heartbeats: %w", err)
	}
	wg.Go(func() {
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			_, _ = w.cli.Revoke(rctx, leaseID) // the heartbeats go with it
			cancel()
		}()
		tick := time.NewTicker(beatPeriod)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := publish(); err != nil && ctx.Err() == nil {
					w.log.Warn("demo: heartbeats", "err", err)
				}
			}
		}
	})
	return nil
}
