package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/lockgov/lockgov/internal/testenv"
)

// env is the servers of one run.
type env struct {
	redisAddr string
	etcd      []string
	dials     atomic.Int64 // TCP connections opened to redis-server by every client of the run
	// etcdCPU is the etcd server's CPU time so far (the runner's etcd child); the uncontended
	// section needs it, the contention section does not.
	etcdCPU func() (time.Duration, error)
}

func (e *env) etcdClient() (*clientv3.Client, error) {
	// No client logging: a cancelled wait logs a warning per call otherwise.
	return clientv3.New(clientv3.Config{Endpoints: e.etcd, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
}

// etcdSession is an etcd client with one concurrency.Session on it (etcd's
// own Mutex needs one) and the function that closes both.
func (e *env) etcdSession() (*concurrency.Session, func(), error) {
	cli, err := e.etcdClient()
	if err != nil {
		return nil, nil, err
	}
	s, err := concurrency.NewSession(cli)
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return s, func() { _ = s.Close(); _ = cli.Close() }, nil
}

// results is everything one run measured.
type results struct {
	start       time.Time
	elapsed     time.Duration
	machine     machine
	versions    []modVersion
	quick       bool
	cfg         config
	uncontended []lockRow
	contended   []contRow
	roundTrips  *roundTrips  // measured in the contention rounds; nil when they did not run
	scripts     *scriptTimes // measured after the contention rounds; nil when they did not run
	ids         []idRow
	sub         []subResult
	notes       []string
}

type machine struct {
	cpu, goVersion, redis string
	nproc, gomaxprocs     int
	loadStart, loadEnd    string
}

type modVersion struct{ path, version string }

func run(ctx context.Context, cfg config, out io.Writer) error {
	res := &results{start: time.Now().UTC(), quick: cfg.quick, cfg: cfg}
	res.machine = machine{cpu: cpuModel(), goVersion: runtime.Version(), nproc: runtime.NumCPU(),
		gomaxprocs: runtime.GOMAXPROCS(0), loadStart: loadAvg()}
	res.versions = versions()
	fmt.Fprintf(out, "bench: %s, %d CPUs, load average %s\n", res.machine.cpu, res.machine.nproc, res.machine.loadStart)

	if cfg.has("locks") || cfg.has("contention") {
		r, err := testenv.StartRedis()
		if err != nil {
			return fmt.Errorf("start redis-server: %w", err)
		}
		defer r.Close()
		res.machine.redis = redisVersion()
		et, err := startEtcdChild()
		if err != nil {
			return fmt.Errorf("start embedded etcd: %w", err)
		}
		defer et.Close()
		e := &env{redisAddr: r.Addr(), etcd: et.endpoints, etcdCPU: et.cpu}
		if cfg.has("locks") {
			fmt.Fprintf(out, "== uncontended acquire+release: %d rounds x %v per case\n", cfg.rounds, cfg.lockDur)
			rows, err := runUncontended(ctx, e, cfg, out)
			if err != nil {
				return err
			}
			res.uncontended = rows
		}
		if cfg.has("contention") {
			rounds := cfg.rounds
			if !cfg.quick {
				rounds = min(rounds, 5)
			}
			fmt.Fprintf(out, "== contention, 8 contenders on one key, 1 ms holds: %d rounds x %v per case\n", rounds, cfg.contDur)
			rows, rt, st, err := runContention(ctx, e, cfg, rounds, out)
			if err != nil {
				return err
			}
			res.contended, res.roundTrips, res.scripts = rows, rt, st
		}
	}
	if cfg.has("ids") {
		fmt.Fprintf(out, "== IDs: %d rounds x %v per case\n", cfg.rounds, cfg.idDur)
		rows, err := runIDs(ctx, cfg, out)
		if err != nil {
			return err
		}
		res.ids = rows
	}
	if cfg.has("sub") {
		if cfg.quick && len(cfg.sections) == 0 {
			res.notes = append(res.notes, "quick run: the quota, idempotency and agent benchmarks (subprocesses) were skipped")
		} else {
			fmt.Fprintln(out, "== other modules' Go benchmarks (subprocesses)")
			res.sub = runSub(ctx, cfg, res.start.Add(cfg.budget), out)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res.machine.loadEnd = loadAvg()
	res.elapsed = time.Since(res.start).Round(time.Second)
	section := renderSection(res)
	fmt.Fprintln(out)
	fmt.Fprintln(out, section)
	if cfg.charts != "" {
		if err := renderCharts(res, cfg.charts); err != nil {
			return err
		}
	}
	if cfg.doc != "" {
		if err := replaceSection(cfg.doc, section); err != nil {
			return err
		}
		fmt.Fprintf(out, "bench: wrote %s\n", cfg.doc)
	}
	return nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func redisVersion() string {
	for _, bin := range []string{"redis-server", "/usr/bin/redis-server"} {
		if out, err := exec.Command(bin, "--version").Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if v, ok := strings.CutPrefix(f, "v="); ok {
					return v
				}
			}
		}
	}
	return "unknown"
}

// versions lists the compared libraries' module versions as built into this binary.
func versions() []modVersion {
	want := []string{
		"github.com/redis/go-redis/v9",
		"github.com/bsm/redislock",
		"github.com/go-redsync/redsync/v4",
		"go.etcd.io/etcd/client/v3",
		"go.etcd.io/etcd/server/v3",
		"github.com/bwmarrin/snowflake",
		"github.com/sony/sonyflake/v2",
		"go.opentelemetry.io/otel/sdk",
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var out []modVersion
	for _, w := range want {
		for _, d := range bi.Deps {
			if d.Path == w {
				v := d.Version
				if d.Replace != nil {
					v = d.Replace.Version
				}
				out = append(out, modVersion{w, v})
			}
		}
	}
	return out
}
