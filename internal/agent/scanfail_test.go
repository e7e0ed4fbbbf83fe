package agent

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
)

// TestScanFailing_AScanThatReadsNothingIsNotACompletedScan holds what the
// LockgovAgentScanFailing alert and its runbook say: the alert fires when
// the agents "completed no scan: no leader, or every scan fails", and it
// reads lockgov_agent_scan_duration_seconds_count. An agent whose Redis
// user may PING (so /readyz is 200 and lockgov_agent_store_up is 1) but
// not SCAN leads, and every scan fails on every read; those scans must
// not count as completed, or no alert fires while the findings stay empty.
// Once the user may SCAN, scans count again.
func TestScanFailing_AScanThatReadsNothingIsNotACompletedScan(t *testing.T) {
	noScan := slices.DeleteFunc(slices.Clone(agentACL), func(r string) bool { return r == "+scan" })
	r := testenv.NewRedis(t, testenv.WithRedisACLUser("lockgov-agent", "agent-secret", noScan...))
	cfg := testConfig("agent")
	cfg.Redis = []string{"redis://lockgov-agent:agent-secret@" + r.Addr()}
	a := start(t, cfg)

	// The leader's published record says what failed: a scan has run to
	// its end.
	waitFor(t, "a scan that reports its errors", func() bool {
		_, body := get(t, a.URL()+"api/v1/findings")
		var doc struct {
			Leader bool     `json:"leader"`
			Errors []string `json:"errors"`
		}
		return json.Unmarshal([]byte(body), &doc) == nil && doc.Leader && len(doc.Errors) > 0
	})
	_, body := get(t, a.URL()+"api/v1/findings")
	if !strings.Contains(body, "NOPERM") {
		t.Fatalf("the scan failed for another reason than the ACL: %s", body)
	}
	waitReady(t, a, "(the store should answer PING)")
	if got := metric(t, a, "lockgov_agent_scan_duration_seconds_count"); got != "0" {
		t.Errorf("lockgov_agent_scan_duration_seconds_count %s after scans that read nothing: LockgovAgentScanFailing cannot fire", got)
	}

	// Allowed to SCAN, the agent's scans complete and count again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Client(t).Do(ctx, "ACL", "SETUSER", "lockgov-agent", "+scan").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a completed scan counted", func() bool {
		got := metric(t, a, "lockgov_agent_scan_duration_seconds_count")
		return got != "" && got != "0"
	})
}
