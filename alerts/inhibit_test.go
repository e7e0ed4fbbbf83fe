package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/mixin"
	"github.com/lockgov/lockgov/internal/testenv"
	"go.yaml.in/yaml/v3"
)

// startAlertmanager runs Debian's prometheus-alertmanager with config on a
// free port, clustering off, and returns its base URL once it is ready.
func startAlertmanager(t *testing.T, config []byte) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus-alertmanager")
	if err != nil {
		if bin, err = exec.LookPath("alertmanager"); err != nil {
			t.Skip("alertmanager not found: install Debian's prometheus-alertmanager package (apt-get install prometheus-alertmanager); scripts/test does")
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "alertmanager.yaml")
	if err := os.WriteFile(path, config, 0o644); err != nil {
		t.Fatal(err)
	}
	attempt := 0
	return testenv.NewHTTPProcess(t, bin, func(port int) []string {
		attempt++
		return []string{"--config.file=" + path, "--storage.path=" + filepath.Join(dir, fmt.Sprint("data", attempt)),
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--cluster.listen-address="}
	}, "/-/ready")
}

// TestAlertmanagerExample_InhibitsWarningByCritical loads the example's
// routes and inhibit rules (receivers swapped for a local webhook, so
// nothing leaves the machine) into a real Alertmanager and holds that a
// warning is inhibited while a critical alert of the same name fires, that
// a warning of another name is not, and that LockgovClockSkewReject
// inhibits LockgovClockSkewDegraded of the same instance only.
func TestAlertmanagerExample_InhibitsWarningByCritical(t *testing.T) {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(hook.Close)
	b, err := AlertmanagerExample(mixin.Default())
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["receivers"] = []map[string]any{
		{"name": PagerReceiver, "webhook_configs": []map[string]string{{"url": hook.URL}}},
		{"name": TicketReceiver, "webhook_configs": []map[string]string{{"url": hook.URL}}},
	}
	local, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := startAlertmanager(t, local)

	type alert map[string]string
	post := []alert{
		{"alertname": "LockgovX", "severity": "critical", "job": "payments"},
		{"alertname": "LockgovX", "severity": "warning", "job": "payments"},
		{"alertname": "LockgovY", "severity": "warning", "job": "payments"},
		{"alertname": "LockgovClockSkewReject", "severity": "critical", "service": "payments", "instance": "pay-0"},
		{"alertname": "LockgovClockSkewDegraded", "severity": "warning", "service": "payments", "instance": "pay-0"},
		{"alertname": "LockgovClockSkewDegraded", "severity": "warning", "service": "payments", "instance": "pay-1"},
	}
	var body []map[string]any
	for _, a := range post {
		body = append(body, map[string]any{"labels": a, "startsAt": time.Now().UTC().Format(time.RFC3339)})
	}
	raw, _ := json.Marshal(body)
	resp, err := http.Post(base+"/api/v2/alerts", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /api/v2/alerts: %s", resp.Status)
	}

	want := map[string]bool{ // alertname/severity/instance -> inhibited
		"LockgovX/critical/": false, "LockgovX/warning/": true, "LockgovY/warning/": false,
		"LockgovClockSkewReject/critical/pay-0": false, "LockgovClockSkewDegraded/warning/pay-0": true,
		"LockgovClockSkewDegraded/warning/pay-1": false,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last map[string]bool
	for {
		last = map[string]bool{}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v2/alerts", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			var got []struct {
				Labels map[string]string `json:"labels"`
				Status struct {
					InhibitedBy []string `json:"inhibitedBy"`
				} `json:"status"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			for _, a := range got {
				last[a.Labels["alertname"]+"/"+a.Labels["severity"]+"/"+a.Labels["instance"]] = len(a.Status.InhibitedBy) > 0
			}
		}
		if fmt.Sprint(last) == fmt.Sprint(want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("inhibited per alert: got %v\nwant %v", last, want)
		case <-time.After(100 * time.Millisecond): // polling the condition, with a deadline
		}
	}
}
