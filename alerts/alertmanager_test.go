package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockgov/lockgov/internal/mixin"
)

// TestAlertmanagerExample_ChecksAndRoutes runs amtool check-config on the
// example and amtool config routes test on one alert per severity: critical
// pages, warning opens a ticket, an alert without severity falls to the
// ticket receiver rather than nowhere.
func TestAlertmanagerExample_ChecksAndRoutes(t *testing.T) {
	amtool, err := exec.LookPath("amtool")
	if err != nil {
		t.Skip("amtool not found: install Debian's prometheus-alertmanager package (apt-get install prometheus-alertmanager); scripts/test does")
	}
	b, err := AlertmanagerExample(mixin.Default())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "routes.example.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(amtool, "check-config", path).CombinedOutput(); err != nil {
		t.Fatalf("amtool check-config: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		receiver string
		labels   []string
	}{
		{PagerReceiver, []string{"alertname=LockgovDeadlock", "severity=critical"}},
		{PagerReceiver, []string{"alertname=LockgovClockSkewReject", "severity=critical", "service=payments", "instance=pay-0"}},
		{TicketReceiver, []string{"alertname=LockgovLockWaitHigh", "severity=warning", "lock_pattern=lock:order:{id}"}},
		{TicketReceiver, []string{"alertname=SomethingElse"}},
	} {
		args := append([]string{"config", "routes", "test", "--config.file=" + path, "--verify.receivers=" + tc.receiver}, tc.labels...)
		// stdout is the receivers; stderr may warn about a system amtool
		// config (Debian's names an --alertmanager.url).
		var stderr strings.Builder
		cmd := exec.Command(amtool, args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != tc.receiver {
			t.Errorf("amtool %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
	}
	// The negative: a critical alert does not reach the ticket receiver.
	args := []string{"config", "routes", "test", "--config.file=" + path, "--verify.receivers=" + TicketReceiver, "severity=critical"}
	if out, err := exec.Command(amtool, args...).CombinedOutput(); err == nil {
		t.Errorf("a critical alert routed to the ticket receiver:\n%s", out)
	}
}
