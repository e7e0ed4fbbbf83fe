package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// subSpec is a Go benchmark of another package, run as a subprocess (go test -bench) because
// it lives in the root module or an example module, not in this one.
type subSpec struct {
	topic     string // "quota", "idempotency", "agent"
	dir       string // module directory, relative to the repository root
	pkg       string // package, relative to dir
	bench     string // -bench regexp
	benchtime string
	env       []string
	label     string // shown in the table
}

// subResult is what one subprocess measured, or why it was skipped.
type subResult struct {
	spec    subSpec
	lines   []benchLine
	skipped string
	elapsed time.Duration
}

// benchLine is one parsed "BenchmarkX-2  N  v unit  v unit ..." line.
type benchLine struct {
	name    string
	n       int64
	metrics []metric
}

type metric struct {
	value float64
	unit  string
}

func subSpecs(agentKeys []int) []subSpec {
	specs := []subSpec{
		{topic: "quota", dir: ".", pkg: "./instrument/quota", bench: ".", benchtime: "1s", label: "instrument/quota"},
		{topic: "idempotency", dir: ".", pkg: "./instrument/idempotency", bench: ".", benchtime: "1s", label: "instrument/idempotency"},
		{topic: "quota", dir: "examples/seckill", pkg: ".", bench: ".", benchtime: "1s", label: "examples/seckill"},
	}
	for _, n := range agentKeys {
		specs = append(specs, subSpec{topic: "agent", dir: ".", pkg: "./detectors", bench: "^BenchmarkScan$", benchtime: "1x",
			env: []string{"LOCKGOV_BENCH_KEYS=" + strconv.Itoa(n)}, label: fmt.Sprintf("detectors, %d keys", n)})
	}
	return specs
}

// runSub runs the subprocess benchmarks that exist, each bounded by what is left of the
// run's time budget (deadline), so that the whole run stays under 10 minutes.
func runSub(ctx context.Context, cfg config, deadline time.Time, out io.Writer) []subResult {
	var res []subResult
	for _, s := range subSpecs(cfg.agentKeys) {
		r := subResult{spec: s}
		dir := filepath.Join(cfg.root, s.dir, s.pkg)
		if ok, why := hasBenchmarks(dir); !ok {
			r.skipped = why
			fmt.Fprintf(out, "  %s: skipped (%s)\n", s.label, why)
			res = append(res, r)
			continue
		}
		left := time.Until(deadline)
		if left < 30*time.Second {
			r.skipped = fmt.Sprintf("the run's time budget was used up (%v left)", left.Round(time.Second))
			fmt.Fprintf(out, "  %s: skipped (%s)\n", s.label, r.skipped)
			res = append(res, r)
			continue
		}
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, min(left, 5*time.Minute))
		cmd := exec.CommandContext(cctx, "go", "test", "-run", "^$", "-bench", s.bench, "-benchmem",
			"-benchtime", s.benchtime, "-count", "1", s.pkg)
		cmd.Dir = filepath.Join(cfg.root, s.dir)
		cmd.Env = append(os.Environ(), s.env...)
		b, err := cmd.CombinedOutput()
		cancel()
		r.elapsed = time.Since(t0).Round(100 * time.Millisecond)
		r.lines = parseBench(string(b))
		switch {
		case err != nil:
			r.skipped = fmt.Sprintf("go test failed: %v: %s", err, lastLines(string(b), 3))
		case len(r.lines) == 0:
			r.skipped = "no benchmark output"
		}
		fmt.Fprintf(out, "  %s: %d benchmarks in %v %s\n", s.label, len(r.lines), r.elapsed, r.skipped)
		res = append(res, r)
	}
	return res
}

// hasBenchmarks reports whether dir has a _test.go file declaring a Benchmark function,
// without compiling anything.
func hasBenchmarks(dir string) (bool, string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, "no such package yet"
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && strings.Contains(string(b), "\nfunc Benchmark") {
			return true, ""
		}
	}
	return false, "no benchmarks in the package yet"
}

// parseBench parses go test -bench output.
func parseBench(s string) []benchLine {
	var out []benchLine
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		l := benchLine{name: f[0], n: n}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			l.metrics = append(l.metrics, metric{v, f[i+1]})
		}
		out = append(out, l)
	}
	return out
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " / ")
}
