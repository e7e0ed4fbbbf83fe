package generate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/mixin"
	"github.com/lockgov/lockgov/internal/telemetry"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// startPrometheus runs Debian's prometheus with config on a free port and
// returns its base URL once it is ready.
func startPrometheus(t *testing.T, dir string, config []byte) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not found: install Debian's prometheus package (apt-get install prometheus); scripts/test does")
	}
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, config, 0o644); err != nil {
		t.Fatal(err)
	}
	attempt := 0
	return testenv.NewHTTPProcess(t, bin, func(port int) []string {
		attempt++
		return []string{"--config.file=" + path, "--storage.tsdb.path=" + filepath.Join(dir, fmt.Sprint("data", attempt)),
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port)}
	}, "/-/ready")
}

// TestGeneratedRules_FireInARealPrometheus loads the generated rule file,
// with short `for` durations from a config block, into a real Prometheus
// that scrapes an exporter of the agent's metrics (the table's own rows,
// served the way the agent serves them, scraped with honor_labels), and
// waits until LockgovLockImmortal, LockgovWorkerIDCollision and
// LockgovClockSkewReject fire in /api/v1/alerts — the last for the skewed
// instance, not the exporter's.
//
// The metric values here are set by the test, not found by detectors, so
// each alert's labels are pinned; TestGeneratedRules_FireAgainstLockgovDemo
// runs the same chain against a real `lockgov demo`.
func TestGeneratedRules_FireInARealPrometheus(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	findings := telemetry.Findings.GaugeVec(nil)
	skew := telemetry.ClockSkewSeconds.GaugeVec(nil)
	reg.MustRegister(findings, skew)
	findings.WithLabelValues("leak", "immortal", "critical").Set(1)
	findings.WithLabelValues("workerid", "workerid_duplicate", "critical").Set(1)
	skew.WithLabelValues("payments", "pay-0").Set(0.7)
	skew.WithLabelValues("payments", "pay-1").Set(0.01)
	exporter := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(exporter.Close)

	cfg, err := mixin.Parse("e2e.yaml", []byte(`for:
  LockgovLockImmortal: 1s
  LockgovWorkerIDCollision: 1s
  LockgovClockSkewReject: 1s
`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
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
`, filepath.Join(out, "rules", "lockgov.rules.yaml"), strings.TrimPrefix(exporter.URL, "http://"))))

	want := []string{
		"LockgovClockSkewReject instance=pay-0",
		"LockgovLockImmortal kind=immortal",
		"LockgovWorkerIDCollision kind=workerid_duplicate",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var firing []string
	for {
		firing = firingAlerts(ctx, base)
		if slices.Equal(firing, want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("firing %v, want %v", firing, want)
		case <-time.After(200 * time.Millisecond): // polling the condition, with a deadline
		}
	}
}

// firingAlerts lists the alerts Prometheus at base reports firing, as
// "name kind=K", or "name instance=I" for the clock-skew alerts, which are
// per instance. An unanswered query lists nothing; callers poll.
func firingAlerts(ctx context.Context, base string) []string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/alerts", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var got struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&got)
	var firing []string
	for _, a := range got.Data.Alerts {
		if a.State != "firing" {
			continue
		}
		switch name := a.Labels["alertname"]; name {
		case "LockgovClockSkewReject":
			firing = append(firing, name+" instance="+a.Labels["instance"])
		default:
			firing = append(firing, name+" kind="+a.Labels["kind"])
		}
	}
	slices.Sort(firing)
	return firing
}
