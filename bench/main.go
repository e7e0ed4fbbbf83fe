// Command bench compares lockgov with the libraries its users would pick instead, side by side
// in one run, and regenerates the "Side by side" section of ../docs/BENCHMARKS.md and its charts
// in ../docs/bench/. It is its own module, so that the peers (bsm/redislock, redsync,
// bwmarrin/snowflake, sonyflake) never enter lockgov's go.mod. Run from this directory:
//
//	go run .            # the full run, under 10 minutes on 2 cores
//	go run . -quick     # seconds per case: a smoke run
//	../scripts/bench    # the same as go run . from the repository root
//
// It starts its own redis-server (PATH or /usr/bin, a free loopback port, a private temporary
// directory) and an embedded etcd through lockgov's internal/testenv, which this module may
// import because its path lies under github.com/lockgov/lockgov; the etcd runs in a child
// process (this binary again, see etcdChild), so that neither server shares the runner's heap,
// collector or scheduler with the clients it measures. Every ratio is computed round
// by round inside this one run (each round runs every case once, in an order shuffled with the
// round's fixed seed, so no case always follows the same one) and the table shows the medians
// over the rounds, since absolute times drift on a shared machine.
//
// The Go benchmarks in snowflake_test.go measure the ID generators with testing.B:
//
//	go test -run '^$' -bench . -benchtime 1s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"
)

// config sizes a run. The defaults fit the whole run in well under 10 minutes on a 2-core
// machine; quick shrinks every case to a fraction of a second for the end-to-end test.
type config struct {
	quick     bool
	doc       string // markdown file whose bench:begin/end section is regenerated ("" = none)
	charts    string // directory for the PNG charts ("" = none)
	chartRef  string // how the doc refers to the charts directory
	rounds    int
	lockDur   time.Duration // per uncontended case per round
	contDur   time.Duration // per contended case per round
	idDur     time.Duration // per ID case per round
	sections  map[string]bool
	agentKeys []int
	root      string        // repository root, for the subprocess benchmarks
	note      string        // appended to the machine line (what else ran on the machine)
	budget    time.Duration // the subprocess benchmarks start only while the run is within it
}

func (c config) has(section string) bool { return len(c.sections) == 0 || c.sections[section] }

func main() {
	var (
		cfg      config
		only     string
		keys     string
		rounds   int
		lockDur  time.Duration
		contDur  time.Duration
		idDur    time.Duration
		noWrite  bool
		chartRef string
	)
	flag.BoolVar(&cfg.quick, "quick", false, "a smoke run: every case a fraction of a second, one round, no subprocess benchmarks")
	flag.StringVar(&cfg.doc, "doc", "../docs/BENCHMARKS.md", "markdown file whose <!-- bench:begin --> ... <!-- bench:end --> section is regenerated")
	flag.StringVar(&cfg.charts, "charts", "../docs/bench", "directory the PNG charts are written to")
	flag.StringVar(&chartRef, "chart-ref", "bench", "the charts directory as the doc links it (relative to the doc)")
	flag.BoolVar(&noWrite, "n", false, "print the table only; write no doc and no charts")
	flag.StringVar(&only, "only", "", "comma-separated sections to run: locks,contention,ids,sub (default all)")
	flag.StringVar(&keys, "agent-keys", "100000,1000000", "lock keys for the agent scan benchmark, comma-separated")
	flag.IntVar(&rounds, "rounds", 0, "rounds per case (default 10, 5 for contention; 1 with -quick)")
	flag.DurationVar(&lockDur, "lock-time", 0, "time per uncontended case per round (default 1s)")
	flag.DurationVar(&contDur, "contention-time", 0, "time per contended case per round (default 2.5s)")
	flag.DurationVar(&idDur, "id-time", 0, "time per ID case per round (default 150ms)")
	flag.StringVar(&cfg.root, "root", "..", "the lockgov repository root")
	flag.DurationVar(&cfg.budget, "budget", 9*time.Minute, "time budget of the whole run: subprocess benchmarks that would start after it are skipped with a note")
	flag.StringVar(&cfg.note, "note", "", "a sentence appended to the machine line, e.g. what else shared the machine")
	flag.Parse()
	cfg = withDefaults(cfg, rounds, lockDur, contDur, idDur)
	cfg.chartRef = chartRef
	if noWrite {
		cfg.doc, cfg.charts = "", ""
	}
	if only != "" {
		cfg.sections = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			cfg.sections[strings.TrimSpace(s)] = true
		}
	}
	var err error
	if cfg.agentKeys, err = parseInts(keys); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -agent-keys:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func withDefaults(cfg config, rounds int, lockDur, contDur, idDur time.Duration) config {
	// Many short rounds rather than a few long ones: on a shared machine a burst of someone
	// else's work spoils one round's ratio, and the median over ten shrugs it off. An
	// uncontended case runs a second per round: at 500 ms the governed pair's per-round ratio
	// to the raw one spread over 0.44-0.97 on a 2-vCPU VM (2026-12-01), too wide for medians
	// of ten to settle a 0.85x target.
	cfg.rounds, cfg.lockDur, cfg.contDur, cfg.idDur = 10, time.Second, 2500*time.Millisecond, 150*time.Millisecond
	if cfg.quick {
		cfg.rounds, cfg.lockDur, cfg.contDur, cfg.idDur = 1, 150*time.Millisecond, 300*time.Millisecond, 30*time.Millisecond
	}
	if cfg.budget == 0 {
		cfg.budget = 9 * time.Minute
	}
	if rounds > 0 {
		cfg.rounds = rounds
	}
	if lockDur > 0 {
		cfg.lockDur = lockDur
	}
	if contDur > 0 {
		cfg.contDur = contDur
	}
	if idDur > 0 {
		cfg.idDur = idDur
	}
	return cfg
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}
