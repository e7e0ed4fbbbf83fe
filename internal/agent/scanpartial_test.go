package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
)

// partialDoc is /api/v1/findings, read with the record's own types (so
// that finding.UnmarshalJSON, which a follower uses, is what reads it).
type partialDoc struct {
	Findings  []finding        `json:"findings"`
	ScannedAt *time.Time       `json:"scanned_at"`
	Leader    bool             `json:"leader"`
	Errors    []string         `json:"errors"`
	Detectors []detectorStatus `json:"detectors"`
}

func partialFindings(t *testing.T, a *Agent) (partialDoc, []finding) {
	t.Helper()
	code, body := get(t, a.URL()+"api/v1/findings")
	var doc partialDoc
	if code != 200 {
		t.Fatalf("/api/v1/findings: %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("/api/v1/findings: %v: %s", err, body)
	}
	return doc, doc.Findings
}

// status is the detector's entry in doc.Detectors, nil if there is none.
func (doc partialDoc) status(detector, store string) *detectorStatus {
	for i := range doc.Detectors {
		if doc.Detectors[i].Detector == detector && doc.Detectors[i].Store == store {
			return &doc.Detectors[i]
		}
	}
	return nil
}

func findFinding(fs []finding, detector, kind, store string, key ...string) *finding {
	for i := range fs {
		if fs[i].Detector == detector && fs[i].Kind == kind && fs[i].Store == store && (len(key) == 0 || fs[i].Key == key[0]) {
			return &fs[i]
		}
	}
	return nil
}

// TestScan_ASlowStoreNeitherStarvesTheOthersNorDropsItsFindings: a scan
// ran the detectors one after another under one ScanTimeout. A store that
// stops answering (SIGSTOP: no error, no reply) made the first detector
// that read it use up the whole timeout, and every detector after it got a
// dead context: findings of a healthy store (here: eviction on Redis B)
// vanished from /api/v1/findings and lockgov_findings for as long as the
// other store was slow, and so did the slow store's own (an immortal lock
// on Redis A). For an alert with `for:`, a finding series that disappears
// for one scan resets its pending timer: a slow store keeps a real alert
// from ever firing.
//
// Each detector and each store's inventory is now bounded on its own, side
// by side, so B's eviction finding is in every scan; and a detector that
// does not complete keeps the findings of its last completed run, marked
// stale with when they were made, in the record and in lockgov_findings,
// while lockgov_agent_detector_last_success_timestamp_seconds stops
// moving for it.
//
// The detectors that read heartbeats read A's too, and failed whole while
// A was paused: a lock leaked on B then went unseen. They now go on with
// the stores they read (detectors.PartialError): B's new leak is fresh,
// a tier read from A's beat is kept stale, and a lock on B whose holder
// beats on A only is not called holder_dead for want of A.
func TestScan_ASlowStoreNeitherStarvesTheOthersNorDropsItsFindings(t *testing.T) {
	e := testenv.NewEtcd(t) // coordination: the election must not depend on A
	ra, rb := testenv.NewRedis(t), testenv.NewRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := ra.Client(t).Set(ctx, "lock:order:42", "someone", 0).Err(); err != nil { // SETNX without EXPIRE
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"maxmemory", "1gb"}, {"maxmemory-policy", "allkeys-lru"}} {
		if err := rb.Client(t).ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A process on another host publishes its heartbeat into A only (a
	// WorkerID lease or a governed Locker on A; a quorum Locker, an adapter
	// or WithoutHeartbeat on B publishes none there) and holds a lock on B.
	remote := &fleet.Heartbeat{Instance: "pod-remote", Service: "svc", Host: "host-pod-remote", PID: 4242,
		StartedAt: time.Now(), SentAt: time.Now(), Interval: fleet.DefaultPeriod, Tier: "reject"}
	beat, err := fleet.Encode(remote)
	if err != nil {
		t.Fatal(err)
	}
	if err := ra.Client(t).Set(ctx, fleet.RedisKey(remote.Instance), beat, 10*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	remoteLock := fmt.Sprintf(`tok 5 {"service":"svc","instance":"pod-remote","host":"host-pod-remote","pid":4242,"v":"test","ttl_ms":600000,"acquired_at_ms":%d,"fence":5}`,
		time.Now().UnixMilli())
	if err := rb.Client(t).Set(ctx, "lock:order:77", remoteLock, 10*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	storeA, storeB := "redis://"+ra.Addr(), "redis://"+rb.Addr()
	cfg := testConfig("agent")
	cfg.Interval = time.Second // each scan while A is paused takes its timeout
	cfg.Etcd, cfg.Redis = e.Endpoints(), []string{storeA, storeB}
	a := start(t, cfg)

	immortal := `lockgov_findings{detector="locks",kind="immortal",severity="critical"}`
	eviction := `lockgov_findings{detector="store",kind="eviction_enabled",severity="warning"}`
	waitFor(t, "both findings from a complete scan", func() bool {
		doc, fs := partialFindings(t, a)
		st := doc.status("locks", storeB)
		return doc.Leader && findFinding(fs, "locks", "immortal", storeA) != nil &&
			findFinding(fs, "store", "eviction_enabled", storeB) != nil &&
			findFinding(fs, "clock", "skew_reject", storeA) != nil &&
			st != nil && st.Error == "" && !st.LastSuccess.IsZero() // B's detector has seen pod-remote on A
	})

	if err := ra.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ra.Resume() })
	// A lock leaked on B while A is paused: B answers, so it is found.
	if err := rb.Client(t).Set(ctx, "lock:order:99", "someone-else", 0).Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	// A scan that started after the pause and the SET, and read nothing on
	// A: the one after a scan that ended after them (a scan that ended
	// after them may have read B before the SET; scans run one after
	// another).
	var doc partialDoc
	var fs []finding
	after := paused
	for _, what := range []string{"a scan that ended after the pause", "a scan that started after the pause"} {
		waitFor(t, what+" and could not read A", func() bool {
			doc, fs = partialFindings(t, a)
			return doc.ScannedAt != nil && doc.ScannedAt.After(after) && slicesContainsSubstr(doc.Errors, storeA)
		})
		after = *doc.ScannedAt
	}
	// B's locks are read: the new leak is a fresh finding; the lock whose
	// holder's heartbeat sits on A is not called dead for want of A.
	if f := findFinding(fs, "locks", "immortal", storeB, "lock:order:99"); f == nil {
		t.Errorf("the lock leaked on B while A is paused is not in /api/v1/findings: one paused store blinds leak detection on B (errors %q)", doc.Errors)
	} else if f.Stale {
		t.Errorf("the lock leaked on B while A is paused is stale (detected at %v): B answered", f.DetectedAt)
	}
	// The clock detector read etcd and B but not A: pod-remote's tier,
	// read from its beat on A, is what it could not check, kept stale.
	if f := findFinding(fs, "clock", "skew_reject", storeA); f == nil || !f.Stale {
		t.Errorf("pod-remote's skew_reject (from its beat on A) while A is paused: %+v; want it kept, stale", f)
	}
	if f := findFinding(fs, "locks", "holder_dead", storeB, "lock:order:77"); f != nil {
		t.Errorf("lock:order:77 on B reported holder_dead (stale %v) while its holder's heartbeat is on A, which could not be read: %s", f.Stale, f.Detail)
	}
	t.Logf("errors of the scan with A paused: %q", doc.Errors)
	if f := findFinding(fs, "store", "eviction_enabled", storeB); f == nil {
		t.Errorf("B's eviction_enabled finding is missing from a scan in which A was slow: the detectors after A's got a dead context")
	} else if f.Stale {
		t.Errorf("B's eviction_enabled finding is stale (detected at %v): B answered", f.DetectedAt)
	}
	if f := findFinding(fs, "locks", "immortal", storeA); f == nil {
		t.Errorf("A's immortal finding is missing from a scan that could not read A: its alert's `for:` starts over")
	} else if !f.Stale || f.DetectedAt.IsZero() || !f.DetectedAt.Before(*doc.ScannedAt) {
		t.Errorf("A's immortal finding from before the pause: stale %v, detected at %v; want stale, detected before the scan at %v",
			f.Stale, f.DetectedAt, doc.ScannedAt)
	}
	// A's immortal lock (stale) and B's new one (fresh); B's eviction.
	for series, want := range map[string]string{immortal: "2", eviction: "1"} {
		if got := metric(t, a, series); got != want {
			t.Errorf("%s = %q while A is paused, want %s", series, got, want)
		}
	}
	// The detectors' status: locks on A failed this scan and last
	// completed when its stale finding was made; store on B completed it.
	stA, stB := doc.status("locks", storeA), doc.status("store", storeB)
	switch {
	case stA == nil || stB == nil:
		t.Errorf("detectors %+v: want locks on A and store on B", doc.Detectors)
	case stA.Error == "" || stB.Error != "":
		t.Errorf("detector errors: locks on A %q, store on B %q; want A's only", stA.Error, stB.Error)
	case !stB.LastSuccess.After(stA.LastSuccess):
		t.Errorf("last success: locks on A %v, store on B %v; want B's after A's", stA.LastSuccess, stB.LastSuccess)
	default:
		if f := findFinding(fs, "locks", "immortal", storeA); f != nil && !f.DetectedAt.Equal(stA.LastSuccess) {
			t.Errorf("A's stale finding detected at %v, its detector's last success %v: want the same", f.DetectedAt, stA.LastSuccess)
		}
		// The gauge stops moving for A: it is A's last success, in this
		// and every later scan while A is paused.
		series := `lockgov_agent_detector_last_success_timestamp_seconds{detector="locks",store="` + storeA + `"}`
		got, err := strconv.ParseFloat(metric(t, a, series), 64)
		if want := float64(stA.LastSuccess.UnixNano()) / 1e9; err != nil || math.Abs(got-want) > 1e-3 {
			t.Errorf("%s = %v (%v), want %v (A's last success)", series, got, err, want)
		}
	}

	// A answers again: its finding is fresh.
	if err := ra.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A's immortal finding fresh again", func() bool {
		_, fs := partialFindings(t, a)
		f := findFinding(fs, "locks", "immortal", storeA)
		return f != nil && !f.Stale
	})
}

func slicesContainsSubstr(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// switchDetector reports one WorkerID collision until fail is set, then
// fails as a detector whose store does not answer.
type switchDetector struct{ fail *atomic.Bool }

func (switchDetector) Name() string { return detectors.DetectorWorkerID }
func (d switchDetector) Detect(context.Context) ([]detectors.Finding, error) {
	if d.fail.Load() {
		return nil, errors.New("read heartbeats: context deadline exceeded")
	}
	return []detectors.Finding{{Detector: detectors.DetectorWorkerID, Kind: detectors.KindWorkerIDDuplicate,
		Severity: detectors.SeverityCritical, Store: "etcd", Key: "workerid/svc/7"}}, nil
}

// TestScan_ANewLeaderKeepsTheFindingsOfADetectorThatFailsFromItsFirstScan:
// the findings a failing detector keeps are those of its last completed
// run; an agent that starts leading while the detector fails has had no
// such run itself. It starts from the record it served as a follower, so
// the collision stays in its answer (stale, with when it was found) and in
// lockgov_findings: a change of leader during a store's slowness does not
// start LockgovWorkerIDCollision's `for:` over either.
func TestScan_ANewLeaderKeepsTheFindingsOfADetectorThatFailsFromItsFirstScan(t *testing.T) {
	e := testenv.NewEtcd(t)
	fail := &atomic.Bool{}
	opt := WithDetectors(func(Stores, *policy.Policy) ([]detectors.Detector, error) {
		return []detectors.Detector{switchDetector{fail}}, nil
	})
	cfgA, cfgB := testConfig("agent-a"), testConfig("agent-b")
	cfgA.Etcd, cfgB.Etcd = e.Endpoints(), e.Endpoints()
	a, b := start(t, cfgA, opt), start(t, cfgB, opt)
	waitFor(t, "one leader", func() bool { return a.Leader() != b.Leader() })
	leader, follower := a, b
	if b.Leader() {
		leader, follower = b, a
	}
	waitFor(t, "the follower to serve the collision", func() bool {
		_, fs := partialFindings(t, follower)
		return findFinding(fs, "workerid", "workerid_duplicate", "etcd") != nil
	})

	fail.Store(true)
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	var doc partialDoc
	var fs []finding
	waitFor(t, "a scan of the new leader", func() bool {
		doc, fs = partialFindings(t, follower)
		return doc.Leader && doc.ScannedAt != nil && doc.ScannedAt.After(closed) && len(doc.Errors) > 0
	})
	f := findFinding(fs, "workerid", "workerid_duplicate", "etcd")
	if f == nil {
		t.Fatalf("the new leader dropped the collision its failing detector found under the old one: %+v", doc)
	}
	if !f.Stale || f.DetectedAt.IsZero() || !f.DetectedAt.Before(closed) {
		t.Errorf("the kept collision: stale %v, detected at %v; want stale, found before %v", f.Stale, f.DetectedAt, closed)
	}
	if got := metric(t, follower, `lockgov_findings{detector="workerid",kind="workerid_duplicate",severity="critical"}`); got != "1" {
		t.Errorf("the new leader's lockgov_findings for the collision = %q, want 1", got)
	}
	if got := metric(t, follower, `lockgov_agent_detector_last_success_timestamp_seconds{detector="workerid",store=""}`); got == "" || got == "0" {
		t.Errorf("the new leader's last success of the detector = %q, want the old leader's", got)
	}
}

// heldDetector reports lock:k's holder dead: held by old until moved is
// set, then, as a partial run that could not check any holder_dead on the
// store, by new.
type heldDetector struct{ moved *atomic.Bool }

func (heldDetector) Name() string { return detectors.DetectorLocks }
func (d heldDetector) Detect(context.Context) ([]detectors.Finding, error) {
	f := detectors.Finding{Detector: detectors.DetectorLocks, Kind: detectors.KindHolderDead,
		Severity: detectors.SeverityCritical, Store: "redis://b", Key: "lock:k", Holder: &detectors.Holder{Instance: "old"}}
	if !d.moved.Load() {
		return []detectors.Finding{f}, nil
	}
	f.Holder = &detectors.Holder{Instance: "new"}
	return []detectors.Finding{f}, &detectors.PartialError{Stores: []string{"redis://a"},
		Scopes: []detectors.Scope{{Kind: detectors.KindHolderDead, Store: "redis://b"}}, Err: errors.New("context deadline exceeded")}
}

// TestScan_APartialRunsFreshFindingOnAKeyReplacesTheStaleOne: a partial
// run keeps, stale, the earlier findings it could not check and did not
// make again; a finding on a lock key that it did make again, about the
// key's new holder, left the old holder's beside it: two holder_dead
// findings for one lock, lockgov_findings counting it twice. A lock has
// one holder: the fresh finding on the key replaces the stale one.
func TestScan_APartialRunsFreshFindingOnAKeyReplacesTheStaleOne(t *testing.T) {
	e := testenv.NewEtcd(t)
	moved := &atomic.Bool{}
	cfg := testConfig("agent")
	cfg.Etcd = e.Endpoints()
	a := start(t, cfg, WithDetectors(func(Stores, *policy.Policy) ([]detectors.Detector, error) {
		return []detectors.Detector{heldDetector{moved}}, nil
	}))
	waitFor(t, "old's holder_dead", func() bool {
		doc, fs := partialFindings(t, a)
		return doc.Leader && findFinding(fs, "locks", "holder_dead", "redis://b", "lock:k") != nil
	})
	moved.Store(true)
	after := time.Now()
	var doc partialDoc
	for _, what := range []string{"a scan that ended after the move", "a scan that started after it"} {
		waitFor(t, what, func() bool {
			doc, _ = partialFindings(t, a)
			return doc.ScannedAt != nil && doc.ScannedAt.After(after)
		})
		after = *doc.ScannedAt
	}
	var onK []finding
	for _, f := range doc.Findings {
		if f.Key == "lock:k" {
			onK = append(onK, f)
		}
	}
	if len(onK) != 1 || onK[0].Stale || onK[0].Holder == nil || onK[0].Holder.Instance != "new" {
		t.Errorf("findings on lock:k after its holder changed, in a partial run: %+v; want one, fresh, about the new holder", onK)
	}
	if got := metric(t, a, `lockgov_findings{detector="locks",kind="holder_dead",severity="critical"}`); got != "1" {
		t.Errorf("lockgov_findings for lock:k's holder_dead = %q, want 1 (one lock)", got)
	}
}
