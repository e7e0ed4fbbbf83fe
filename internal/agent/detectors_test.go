package agent

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
)

// TestDefaultDetectors_ReportAnImmortalLockThroughTheAPIAndMetrics holds
// the wiring from the agent's stores to the detectors package: with no
// WithDetectors option, a lock key without a TTL becomes an "immortal"
// finding on /api/v1/findings and in lockgov_findings.
func TestDefaultDetectors_ReportAnImmortalLockThroughTheAPIAndMetrics(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Set(ctx, "lock:order:42", "someone", 0).Err(); err != nil { // SETNX without EXPIRE: the spec's incident
		t.Fatal(err)
	}
	cfg := testConfig("agent")
	cfg.Redis = []string{"redis://" + r.Addr()}
	a := start(t, cfg)
	var got struct {
		Findings []struct {
			Detector, Kind, Severity, Key string
			Holder                        *struct{ Foreign bool }
		}
		Leader bool
	}
	waitFor(t, "an immortal finding", func() bool {
		_, body := get(t, a.URL()+"api/v1/findings")
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("findings: %v in %s", err, body)
		}
		for _, f := range got.Findings {
			if f.Kind == "immortal" && f.Key == "lock:order:42" {
				return true
			}
		}
		return false
	})
	for _, f := range got.Findings {
		if f.Kind == "immortal" && (f.Detector != "locks" || f.Severity == "" || f.Holder == nil || !f.Holder.Foreign) {
			t.Errorf("finding %+v: want detector locks, a severity and a foreign holder", f)
		}
	}
	if v := metric(t, a, `lockgov_findings{detector="locks",kind="immortal",severity="critical"}`); v != "1" {
		t.Errorf(`lockgov_findings{detector="locks",kind="immortal",severity="critical"} = %q, want 1`, v)
	}
}
