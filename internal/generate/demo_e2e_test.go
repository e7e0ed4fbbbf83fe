package generate

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/buildflags"
	"github.com/lockgov/lockgov/internal/mixin"
)

// TestGeneratedRules_FireAgainstLockgovDemo is the end-to-end test of the
// observability-as-code chain: a real Prometheus loads the generated rules
// (with short `for` durations from a config block) and scrapes a running
// `lockgov demo`, whose agent finds what its workload creates; the test
// waits until LockgovLockImmortal, LockgovWorkerIDCollision and, for the
// skewed instance, LockgovClockSkewReject fire in /api/v1/alerts.
func TestGeneratedRules_FireAgainstLockgovDemo(t *testing.T) {
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Skip("prometheus not found: install Debian's prometheus package (apt-get install prometheus); scripts/test does")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "lockgov")
	// With this test binary's -race: see internal/buildflags.
	args := append(append([]string{"build"}, buildflags.Args()...), "-o", bin, "github.com/lockgov/lockgov/cmd/lockgov")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	demo := exec.Command(bin, "demo", "--listen", "127.0.0.1:0", "--interval", "1s")
	demo.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	stdout, err := demo.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "http://") {
				select {
				case urls <- line:
				default:
				}
			}
		}
		exited <- demo.Wait()
	}()
	t.Cleanup(func() {
		_ = demo.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = demo.Process.Kill()
			<-exited
		}
	})
	var url string
	select {
	case url = <-urls:
	case err := <-exited:
		t.Fatalf("lockgov demo exited before printing its console URL: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("lockgov demo printed no console URL within 3 minutes")
	}
	target := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")

	cfg, err := mixin.Parse("e2e.yaml", []byte(`for:
  LockgovLockImmortal: 1s
  LockgovWorkerIDCollision: 1s
  LockgovClockSkewReject: 1s
`))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := Generate(out, Plain, cfg); err != nil {
		t.Fatal(err)
	}
	base := startPrometheus(t, dir, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %s
scrape_configs:
  - job_name: lockgov-agent
    honor_labels: true
    static_configs:
      - targets: [%q]
`, filepath.Join(out, "rules", "lockgov.rules.yaml"), target)))

	want := []string{
		"LockgovClockSkewReject instance=billing-skewed",
		"LockgovLockImmortal kind=immortal",
		"LockgovWorkerIDCollision kind=workerid_duplicate",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var firing []string
	for {
		firing = firingAlerts(ctx, base)
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(firing, w) })
		if len(missing) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not firing: %v (firing: %v)", missing, firing)
		case err := <-exited:
			t.Fatalf("lockgov demo exited while the test waited: %v", err)
		case <-time.After(500 * time.Millisecond): // polling the condition, with a deadline
		}
	}
}
