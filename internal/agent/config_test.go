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
// meet: the file (both set there), the merged config (CheckConfig: the
// interval from --interval or its default) and Start for library users. An
// unset scan timeout is still the interval.
func TestConfig_ScanTimeoutLongerThanIntervalIsAnError(t *testing.T) {
	_, err := ParseConfig("agent.yaml", []byte("interval: 10s\nscan_timeout: 30s\n"))
	if err == nil || !strings.Contains(err.Error(), "agent.yaml:2: scan_timeout: 30s is longer than interval 10s") {
		t.Errorf("ParseConfig: %v; want agent.yaml:2: scan_timeout: 30s is longer than interval 10s", err)
	}

	// The interval comes from elsewhere (--interval, its default): the
	// file alone parses, and the merged config is refused.
	cfg, err := ParseConfig("agent.yaml", []byte("scan_timeout: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckConfig(cfg); err == nil || !strings.Contains(err.Error(), "scan_timeout 30s is longer than interval 15s") {
		t.Errorf("CheckConfig with the default interval: %v; want scan_timeout 30s is longer than interval 15s", err)
	}
	cfg.Interval = 10 * time.Second
	if err := CheckConfig(cfg); err == nil || !strings.Contains(err.Error(), "scan_timeout 30s is longer than interval 10s") {
		t.Errorf("CheckConfig: %v; want scan_timeout 30s is longer than interval 10s", err)
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
