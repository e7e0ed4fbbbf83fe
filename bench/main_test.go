package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun_Quick runs the whole runner in -quick mode (every case a fraction of a second, one
// round, no subprocess benchmarks) against its own redis-server and embedded etcd, and checks
// that it rewrites only the marked section of the doc, with a well-formed table and charts.
// It says nothing about speed: figures under -race are meaningless.
func TestRun_Quick(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "BENCHMARKS.md")
	const before, after = "# Benchmarks\n\nIntro.\n\n", "\n\n## Someone else's section\n\nKept as it is.\n"
	if err := os.WriteFile(doc, []byte(before+beginMarker+"\nold figures\n"+endMarker+after), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := withDefaults(config{quick: true, doc: doc, charts: filepath.Join(dir, "bench"), chartRef: "bench", root: ".."}, 0, 0, 0, 0)
	cfg.idDur = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if !strings.HasPrefix(got, before+beginMarker) || !strings.HasSuffix(got, endMarker+after) || strings.Contains(got, "old figures") {
		t.Fatalf("the doc outside the markers changed, or the section was not replaced:\n%s", got)
	}
	for _, want := range []string{
		"### Targets (issue 12)", "### Locks: uncontended acquire + release", "### Locks: contention on one key", "### IDs",
		nameRaw, nameRawSpans, nameBare, nameGoverned, nameBSM, nameRedsync, nameEtcdMu, nameEtcdlock,
		nameBSMLinear, nameBSMExp, nameRedsyncC, nameWait, nameFair, nameEtcdlockC,
		idLockgov, idBatch, idSegment, idBwmarrin, idSonyflake, "load average", "github.com/bsm/redislock v",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q", want)
		}
	}
	if n := strings.Count(got, "| uncontended, 16 goroutines:"); n != 4 {
		t.Errorf("%d uncontended target rows, want 4", n)
	}
	if strings.Contains(got, "not measured in this run") {
		t.Errorf("a target was not measured:\n%s", got)
	}
	// Every table row has as many cells as its header.
	var cols int
	for _, l := range strings.Split(got, "\n") {
		if !strings.HasPrefix(l, "|") {
			cols = 0
			continue
		}
		n := strings.Count(l, "|")
		if cols == 0 {
			cols = n
		} else if n != cols {
			t.Errorf("row with %d cells under a header of %d: %s", n-1, cols-1, l)
		}
	}
	for _, c := range chartFiles {
		fi, err := os.Stat(filepath.Join(dir, "bench", c.file))
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Size() == 0 || fi.Size() > 100<<10 {
			t.Errorf("%s: %d bytes, want 1 byte to 100 KB", c.file, fi.Size())
		}
		if !strings.Contains(got, "](bench/"+c.file+")") {
			t.Errorf("the section does not link %s", c.file)
		}
	}
}

func TestReplaceSection(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "doc.md")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	sec := beginMarker + "\nnew\n" + endMarker

	p := write("# B\n\nintro\n\n## Locks\n\nx\n")
	if err := replaceSection(p, sec); err != nil {
		t.Fatal(err)
	}
	if got, want := read(p), "# B\n\nintro\n\n"+sec+"\n\n## Locks\n\nx\n"; got != want {
		t.Errorf("no markers yet: got\n%q\nwant\n%q", got, want)
	}
	if err := replaceSection(p, beginMarker+"\nnewer\n"+endMarker); err != nil {
		t.Fatal(err)
	}
	if got, want := read(p), "# B\n\nintro\n\n"+beginMarker+"\nnewer\n"+endMarker+"\n\n## Locks\n\nx\n"; got != want {
		t.Errorf("replacing: got\n%q\nwant\n%q", got, want)
	}
	p = write("# B\n" + endMarker + "\n" + beginMarker + "\n")
	if err := replaceSection(p, sec); err == nil {
		t.Error("markers in the wrong order: no error")
	}
	if got := read(p); got != "# B\n"+endMarker+"\n"+beginMarker+"\n" {
		t.Errorf("a failed replace changed the file: %q", got)
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkScan-2   	       1	1234567890 ns/op	    84723 keys/s	        14.70 peak-heap-MB	        44.70 peak-rss-MB	1100 B/op	      18 allocs/op
BenchmarkTake/one-2	  500000	      2400 ns/op
PASS
ok  	github.com/lockgov/lockgov/detectors	12.3s
`
	ls := parseBench(out)
	if len(ls) != 2 || ls[0].name != "BenchmarkScan-2" || ls[0].n != 1 || len(ls[0].metrics) != 6 ||
		ls[0].metrics[1] != (metric{84723, "keys/s"}) || ls[1].metrics[0] != (metric{2400, "ns/op"}) {
		t.Fatalf("parsed %+v", ls)
	}
}

func TestHasBenchmarks(t *testing.T) {
	if ok, why := hasBenchmarks("../no/such/package"); ok || why == "" {
		t.Errorf("missing package: %v %q", ok, why)
	}
	if ok, _ := hasBenchmarks("../detectors"); !ok {
		t.Error("detectors has BenchmarkScan but was not found")
	}
}
