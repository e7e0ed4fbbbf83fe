package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
)

const testInterval = 200 * time.Millisecond

// syncBuf is a log sink tests can read while the agent writes.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testConfig(id string) Config {
	return Config{ID: id, Listen: "127.0.0.1:0", Interval: testInterval, Stdout: io.Discard,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func start(t *testing.T, cfg Config, opts ...Option) *Agent {
	t.Helper()
	a, err := Start(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// waitFor polls cond until it holds, failing the test after a deadline
// generous enough for a loaded machine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not a synchronisation
	}
}

// waitReady waits for /readyz to answer 200 on a store that is up. Readiness
// is a sample: every interval each store is pinged again, each ping bounded
// by half an interval (100 ms at testInterval) so that /readyz turns 503
// within two intervals of a store going down (the documented promise). On a
// loaded machine one ping may take longer (a linearizable read of an etcd
// that is fsyncing, a Redis not scheduled), and /readyz is then 503 until
// the next check, as it should be: reading it once bets that the last ping
// beat that bound. A store that is up answers a later ping within it; one
// the agent cannot reach (wrong address, refused PING, a bad password) never
// does, and the wait fails.
func waitReady(t *testing.T, a *Agent, what string) {
	t.Helper()
	waitFor(t, "/readyz 200 "+what, func() bool {
		code, _ := get(t, a.URL()+"readyz")
		return code == 200
	})
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value line of a metric without labels (or with the
// given label text), "" when absent.
func metric(t *testing.T, a *Agent, series string) string {
	t.Helper()
	_, body := get(t, a.URL()+"metrics")
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return v
		}
	}
	return ""
}

type findingsDoc struct {
	Findings  []detectors.Finding `json:"findings"`
	ScannedAt *time.Time          `json:"scanned_at"`
	Leader    bool                `json:"leader"`
}

func findings(t *testing.T, a *Agent) findingsDoc {
	t.Helper()
	code, body := get(t, a.URL()+"api/v1/findings")
	var doc findingsDoc
	if code != 200 || json.Unmarshal([]byte(body), &doc) != nil {
		t.Fatalf("/api/v1/findings: %d %s", code, body)
	}
	return doc
}

// staticDetector reports one finding, so that a test can see it travel
// from the leader to the followers.
type staticDetector struct{ f detectors.Finding }

func (d staticDetector) Name() string { return d.f.Detector }
func (d staticDetector) Detect(context.Context) ([]detectors.Finding, error) {
	return []detectors.Finding{d.f}, nil
}

func withStatic(f detectors.Finding) Option {
	return WithDetectors(func(Stores, *policy.Policy) ([]detectors.Detector, error) {
		return []detectors.Detector{staticDetector{f}}, nil
	})
}

func TestTwoAgents_OneLeadsAndTheOtherTakesOverWhenItStops(t *testing.T) {
	e := testenv.NewEtcd(t)
	f := detectors.Finding{Detector: "locks", Kind: "immortal", Severity: "critical", Store: "etcd", Key: "lock:x", TTL: -1, Age: 90 * time.Second}
	cfgA, cfgB := testConfig("agent-a"), testConfig("agent-b")
	cfgA.Etcd, cfgB.Etcd = e.Endpoints(), e.Endpoints()
	a := start(t, cfgA, withStatic(f))
	b := start(t, cfgB, withStatic(f))

	waitFor(t, "one leader", func() bool { return a.Leader() != b.Leader() })
	leader, follower := a, b
	if b.Leader() {
		leader, follower = b, a
	}
	if got := metric(t, leader, "lockgov_agent_leader"); got != "1" {
		t.Errorf("leader's lockgov_agent_leader = %q, want 1", got)
	}
	if got := metric(t, follower, "lockgov_agent_leader"); got != "0" {
		t.Errorf("follower's lockgov_agent_leader = %q, want 0", got)
	}
	// The follower serves the leader's findings and says it follows.
	waitFor(t, "the follower to serve the leader's findings", func() bool {
		doc := findings(t, follower)
		return len(doc.Findings) == 1 && doc.ScannedAt != nil
	})
	doc := findings(t, follower)
	if doc.Leader || doc.Findings[0].Key != "lock:x" || doc.Findings[0].Age != 90*time.Second {
		t.Errorf("follower serves %+v", doc)
	}
	if !findings(t, leader).Leader {
		t.Error(`the leader's answer says "leader": false`)
	}
	if got := metric(t, leader, `lockgov_findings{detector="locks",kind="immortal",severity="critical"}`); got != "1" {
		t.Errorf("leader's lockgov_findings = %q, want 1", got)
	}

	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follower to take over", follower.Leader)
	if got := metric(t, follower, "lockgov_agent_leader"); got != "1" {
		t.Errorf("new leader's lockgov_agent_leader = %q, want 1", got)
	}
}

func TestTwoAgents_RedisOnly_ElectThroughAFencedLock(t *testing.T) {
	r := testenv.NewRedis(t)
	cfgA, cfgB := testConfig("agent-a"), testConfig("agent-b")
	cfgA.Redis = []string{"redis://" + r.Addr()}
	cfgB.Redis = cfgA.Redis
	f := detectors.Finding{Detector: "clock", Kind: "skew_reject", Severity: "critical", Store: "redis"}
	a := start(t, cfgA, withStatic(f))
	b := start(t, cfgB, withStatic(f))
	waitFor(t, "one leader", func() bool { return a.Leader() != b.Leader() })
	leader, follower := a, b
	if b.Leader() {
		leader, follower = b, a
	}
	waitFor(t, "the follower to serve the leader's findings", func() bool {
		doc := findings(t, follower)
		return len(doc.Findings) == 1 && !doc.Leader
	})
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follower to take over", follower.Leader)
}

func TestStoreDown_ReadyzIs503WithTheReasonAndRecovers(t *testing.T) {
	r := testenv.NewRedis(t)
	cfg := testConfig("agent")
	cfg.Redis = []string{"redis://" + r.Addr() + "?dial_timeout=100ms&max_retries=0"}
	a := start(t, cfg)
	waitReady(t, a, "with the store up")
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	var body string
	waitFor(t, "/readyz 503", func() bool {
		var code int
		code, body = get(t, a.URL()+"readyz")
		return code == 503
	})
	if !strings.Contains(body, "store redis://"+r.Addr()) {
		t.Errorf("/readyz body %q does not name the store", body)
	}
	if code, _ := get(t, a.URL()+"healthz"); code != 200 {
		t.Errorf("/healthz = %d while a store is down; the process should stay up", code)
	}
	if got := metric(t, a, `lockgov_agent_store_up{store="redis://`+r.Addr()+`"}`); got != "0" {
		t.Errorf("lockgov_agent_store_up = %q, want 0", got)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/readyz 200 after the store returns", func() bool {
		code, _ := get(t, a.URL()+"readyz")
		return code == 200
	})
	waitFor(t, "the agent to lead again", a.Leader)
}

func TestStart_MalformedURLNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		cfg  func(*Config)
		want []string
	}{
		{func(c *Config) { c.Redis = []string{"redis://user:s3cret@host:port"} }, []string{"--redis", "invalid port"}},
		{func(c *Config) { c.Redis = []string{"http://localhost:6380"} }, []string{"--redis", `scheme "http"`}},
		{func(c *Config) { c.Redis = []string{"redis-sentinel://h:26379"} }, []string{"--redis", "names the master"}},
		{func(c *Config) { c.Redis = []string{"redis://h:1?cluster=maybe"} }, []string{"--redis", "cluster="}},
		{func(c *Config) { c.Etcd = []string{"localhost"} }, []string{"--etcd", "host:port"}},
		{func(c *Config) { c.Etcd = []string{"ftp://h:1"} }, []string{"--etcd", `scheme "ftp"`}},
	} {
		cfg := testConfig("agent")
		tc.cfg(&cfg)
		_, err := Start(context.Background(), cfg)
		if err == nil {
			t.Errorf("%v %v: no error", cfg.Redis, cfg.Etcd)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not contain %q", err, w)
			}
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error %q repeats the password", err)
		}
	}
}

func TestParseConfig_ErrorsNameFileLineAndField(t *testing.T) {
	src := "redis:\n  - redis://localhost:6380\ninterval: soon\nlisten: [a]\nfrobnicate: 1\netcd: ftp://x:1\npolicy: a.yaml\npolicy: b.yaml\n"
	_, err := ParseConfig("agent.yaml", []byte(src))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`agent.yaml:3: interval: "soon" is not a positive duration`,
		"agent.yaml:4: listen: must be a string, got a list",
		"agent.yaml:5: frobnicate: unknown field",
		`agent.yaml:6: etcd: ftp://x:1: scheme "ftp"`,
		"agent.yaml:8: policy: duplicate field (first at line 7)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\ndoes not contain %q", err, want)
		}
	}
	cfg, err := ParseConfig("ok.yaml", []byte("redis: redis://a:1\netcd: a:2379,b:2379\ninterval: 5s\npatterns: [\"lock:*\", \"mutex:*\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Redis) != 1 || len(cfg.Etcd) != 2 || cfg.Interval != 5*time.Second || len(cfg.Patterns) != 2 {
		t.Errorf("parsed %+v", cfg)
	}
}

func TestStoreDown_Etcd_ReadyzIs503AndTheAgentLeadsAgainAfterRestart(t *testing.T) {
	e := testenv.NewEtcd(t)
	cfg := testConfig("agent")
	cfg.Etcd = e.Endpoints()
	a := start(t, cfg)
	waitFor(t, "the agent to lead", a.Leader)
	e.Stop()
	var body string
	waitFor(t, "/readyz 503", func() bool {
		var code int
		code, body = get(t, a.URL()+"readyz")
		return code == 503
	})
	if !strings.Contains(body, "store etcd://") {
		t.Errorf("/readyz body %q does not name the store", body)
	}
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/readyz 200 after etcd returns", func() bool {
		code, _ := get(t, a.URL()+"readyz")
		return code == 200
	})
	waitFor(t, "the agent to lead after etcd returns", a.Leader)
	waitFor(t, "a scan after etcd returns", func() bool { return findings(t, a).ScannedAt != nil })
}

// TestStoreDown_APausedStoreIsNotReadyWithinTwoIntervals: a store that
// stops answering (SIGSTOP: connections stay open, no reply comes) is
// found only by a ping timing out. /readyz is documented to turn 503
// within two intervals of a store going down: up to one interval to the
// next check, so each check's ping must give up within half of one, even
// with the scan timeout at its default (the interval). Every ping's
// deadline is checked, not the wall clock; then the paused store makes
// /readyz 503.
func TestStoreDown_APausedStoreIsNotReadyWithinTwoIntervals(t *testing.T) {
	r := testenv.NewRedis(t)
	cfg := testConfig("agent")
	cfg.Interval = time.Second // ScanTimeout defaults to it
	cfg.Redis = []string{"redis://" + r.Addr()}
	pings := &pingDeadlines{}
	a := start(t, cfg, WithDetectors(func(s Stores, pol *policy.Policy) ([]detectors.Detector, error) {
		for _, rs := range s.Redis {
			rs.Client.AddHook(pings)
		}
		return BuildDetectors(s, pol)
	}))
	waitReady(t, a, "with the store up")
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Resume() })
	var body string
	waitFor(t, "/readyz 503", func() bool {
		var code int
		code, body = get(t, a.URL()+"readyz")
		return code == 503
	})
	if !strings.Contains(body, "store redis://"+r.Addr()) {
		t.Errorf("/readyz body %q does not name the store", body)
	}
	n, longest, unbounded := pings.result()
	if n == 0 || unbounded > 0 || longest > cfg.Interval/2 {
		t.Errorf("%d health pings, %d without a deadline, the longest allowed %v: want every one bounded by half the interval (%v), so that a store down is seen within two intervals",
			n, unbounded, longest, cfg.Interval/2)
	}
}

// pingDeadlines is a go-redis hook (client.AddHook) that records how long
// each PING was given by its context's deadline.
type pingDeadlines struct {
	mu        sync.Mutex
	n         int
	longest   time.Duration
	unbounded int
}

func (h *pingDeadlines) result() (n int, longest time.Duration, unbounded int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n, h.longest, h.unbounded
}

func (h *pingDeadlines) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pingDeadlines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *pingDeadlines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "ping" {
			dl, ok := ctx.Deadline()
			h.mu.Lock()
			h.n++
			if !ok {
				h.unbounded++
			} else {
				h.longest = max(h.longest, time.Until(dl))
			}
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// TestHTTP_AnAgentURLWithATrailingSlashStillReachesTheAPI: the agent
// prints its console's URL with a trailing slash; a runbook's
// "$AGENT/api/v1/findings" built from it sends "//api/v1/findings". Before,
// ServeMux answered a redirect (307, not followed by curl without -L);
// now it is the API's own answer, for GET and for the remediation DELETE.
func TestHTTP_AnAgentURLWithATrailingSlashStillReachesTheAPI(t *testing.T) {
	r := testenv.NewRedis(t)
	cfg := testConfig("agent")
	cfg.Redis = []string{"redis://" + r.Addr()}
	cfg.RemediationToken = "tok"
	a := start(t, cfg)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/api/v1/findings", "//api/v1/findings", "///api/v1/instances", "//healthz"} {
		resp, err := noRedirect.Get(strings.TrimSuffix(a.URL(), "/") + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", path, resp.StatusCode)
		}
	}
	req, err := http.NewRequest(http.MethodDelete, a.URL()+"/api/v1/locks?key=lock:absent", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("DELETE //api/v1/locks of an absent key: %d, want the API's own answer, 404", resp.StatusCode)
	}
}
