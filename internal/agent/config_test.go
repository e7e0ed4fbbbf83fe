package agent

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestConfig_ScanTimeoutLongerThanIntervalIsAnError: a scan_timeout longer
// than the interval was cut to the interval without a word, so a user who
// wrote scan_timeout: 30s with interval: 10s got scans that timed out at
// 10 s on a big fleet. As Prometheus refuses a scrape_timeout greater than
// its scrape_interval, it is an error naming both values, wherever the two
// meet: the merged config (CheckConfig: the interval from the file,
// --interval or its default; the file's line named) and Start for library
// users. An unset scan timeout is still the interval.
func TestConfig_ScanTimeoutLongerThanIntervalIsAnError(t *testing.T) {
	// Both in the file: the merged config is refused, naming the line
	// that set the scan timeout, unless --interval raises the interval
	// (flags override the file: the file alone decides nothing).
	both, err := ParseConfig("agent.yaml", []byte("interval: 10s\nscan_timeout: 30s\n"))
	if err != nil {
		t.Fatalf("ParseConfig: %v; want the file to parse (--interval may override its interval)", err)
	}
	if err := CheckConfig(both); err == nil || !strings.Contains(err.Error(), "scan_timeout 30s (agent.yaml:2) is longer than interval 10s") {
		t.Errorf("CheckConfig: %v; want scan_timeout 30s (agent.yaml:2) is longer than interval 10s", err)
	}
	both.Interval = time.Minute // --interval 1m
	if err := CheckConfig(both); err != nil {
		t.Errorf("CheckConfig with the interval raised to 1m: %v", err)
	}

	// The interval comes from elsewhere (--interval, its default).
	cfg, err := ParseConfig("agent.yaml", []byte("scan_timeout: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckConfig(cfg); err == nil || !strings.Contains(err.Error(), "scan_timeout 30s (agent.yaml:1) is longer than interval 15s") {
		t.Errorf("CheckConfig with the default interval: %v; want scan_timeout 30s (agent.yaml:1) is longer than interval 15s", err)
	}
	cfg.Interval = 10 * time.Second
	if err := CheckConfig(cfg); err == nil || !strings.Contains(err.Error(), "scan_timeout 30s (agent.yaml:1) is longer than interval 10s") {
		t.Errorf("CheckConfig: %v; want scan_timeout 30s (agent.yaml:1) is longer than interval 10s", err)
	}

	for _, tc := range []struct {
		interval, scanTimeout time.Duration
		want                  string // "" for no error
		wantTimeout           time.Duration
	}{
		{10 * time.Second, 30 * time.Second, "scan_timeout 30s is longer than interval 10s", 0},
		{0, 20 * time.Second, "scan_timeout 20s is longer than interval 15s", 0},
		{10 * time.Second, -time.Second, "scan_timeout -1s: want > 0", 0},
		{10 * time.Second, 0, "", 10 * time.Second},
		{10 * time.Second, 10 * time.Second, "", 10 * time.Second},
		{10 * time.Second, 3 * time.Second, "", 3 * time.Second},
	} {
		c := testConfig("agent")
		c.Interval, c.ScanTimeout = tc.interval, tc.scanTimeout
		err := c.validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("interval %v, scan timeout %v: %v", tc.interval, tc.scanTimeout, err)
		case tc.want == "" && c.ScanTimeout != tc.wantTimeout:
			t.Errorf("interval %v, scan timeout %v: got scan timeout %v, want %v", tc.interval, tc.scanTimeout, c.ScanTimeout, tc.wantTimeout)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("interval %v, scan timeout %v: %v; want %q", tc.interval, tc.scanTimeout, err, tc.want)
		}
		if tc.want == "" {
			continue
		}
		// Start refuses it before opening anything (a store on port 1,
		// where nothing listens, so that no embedded etcd starts).
		c = testConfig("agent")
		c.Redis = []string{"redis://127.0.0.1:1"}
		c.Interval, c.ScanTimeout = tc.interval, tc.scanTimeout
		if a, err := Start(context.Background(), c); err == nil {
			_ = a.Close()
			t.Errorf("Start with interval %v, scan timeout %v: no error", tc.interval, tc.scanTimeout)
		}
	}
}
