package alerts

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/lockgov/lockgov/internal/mixin"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// File is a Prometheus rule file.
type File struct {
	Groups []Group `yaml:"groups"`
}

// Group is a rule group; its rules are evaluated in order.
type Group struct {
	Name  string `yaml:"name"`
	Rules []Rule `yaml:"rules"`
}

// Rule is a recording rule (Record set) or an alerting rule (Alert set).
type Rule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         model.Duration    `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// Severities of the alerts; Alertmanager routes on them.
const (
	Critical = "critical"
	Warning  = "warning"
)

// Recording rule names the dashboards read.
const (
	AcquireP99       = "lock_pattern:lockgov_lock_acquire_duration_seconds:p99"
	AcquireP50       = "lock_pattern:lockgov_lock_acquire_duration_seconds:p50"
	HoldP99          = "lock_pattern:lockgov_lock_hold_duration_seconds:p99"
	AcquireFailRatio = "lock_pattern:lockgov_lock_acquire_failures:ratio"
	ScanP99          = "job:lockgov_agent_scan_duration_seconds:p99"
)

// Groups returns the recording and alerting rules for cfg.
func Groups(cfg mixin.Config) []Group {
	r := builder{cfg: cfg, w: cfg.Thresholds.RateWindow.String()}
	return []Group{
		{Name: "lockgov.recording", Rules: r.recording()},
		{Name: "lockgov.locks", Rules: r.locks()},
		{Name: "lockgov.ids", Rules: r.ids()},
		{Name: "lockgov.tokens", Rules: r.tokens()},
		{Name: "lockgov.agent", Rules: r.agent()},
	}
}

// YAML renders the rule file for cfg: byte-identical for equal configs.
func YAML(cfg mixin.Config) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(File{Groups: Groups(cfg)}); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	return b.Bytes(), nil
}

type builder struct {
	cfg mixin.Config
	w   string // rate window
}

// selector selects metric name with the services' selector and extra
// matchers: lockgov_lock_held{job=~"x",lock_pattern="y"}.
func selector(name, matchers string) string {
	if matchers == "" {
		return name
	}
	return name + "{" + matchers + "}"
}

func (r builder) svc(name string, extra ...string) string {
	return selector(name, r.cfg.Selector(extra...))
}

func (r builder) agt(name string, extra ...string) string {
	return selector(name, r.cfg.AgentSelector(extra...))
}

const (
	byPattern  = "cluster, namespace, job, backend, lock_pattern"
	byService  = "cluster, namespace, job"
	byInstance = "cluster, namespace, job, instance"
	byFinding  = "cluster, namespace, detector, kind"
)

func (r builder) alert(name, severity, expr, summary, description string) Rule {
	return Rule{
		Alert:  name,
		Expr:   expr,
		For:    r.cfg.For[name],
		Labels: map[string]string{"severity": severity},
		Annotations: map[string]string{
			"summary":     summary,
			"description": description,
			"runbook_url": r.cfg.RunbookBase + name + ".md",
		},
	}
}

func (r builder) recording() []Rule {
	quantile := func(record, q, metric string, by string) Rule {
		return Rule{Record: record, Expr: fmt.Sprintf("histogram_quantile(%s, sum by (%s, le) (rate(%s[%s])))", q, by, r.svc(metric+"_bucket"), r.w)}
	}
	failed := `result=~"error|not_acquired"`
	return []Rule{
		quantile(AcquireP99, "0.99", "lockgov_lock_acquire_duration_seconds", byPattern),
		quantile(AcquireP50, "0.5", "lockgov_lock_acquire_duration_seconds", byPattern),
		quantile(HoldP99, "0.99", "lockgov_lock_hold_duration_seconds", byPattern),
		{Record: AcquireFailRatio, Expr: fmt.Sprintf("sum by (%s) (rate(%s[%s]))\n/\nsum by (%[1]s) (rate(%[4]s[%[3]s]))",
			byPattern, r.svc("lockgov_lock_acquire_total", failed), r.w, r.svc("lockgov_lock_acquire_total"))},
		{Record: ScanP99, Expr: fmt.Sprintf("histogram_quantile(0.99, sum by (cluster, namespace, job, le) (rate(%s[%s])))",
			r.agt("lockgov_agent_scan_duration_seconds_bucket"), r.w)},
	}
}

// finding is an alert on the agent's open findings of some kinds. Agents
// that follow serve the leader's findings, so max, not sum, over agents.
func (r builder) finding(name, severity, kind, summary, description string) Rule {
	expr := fmt.Sprintf("max by (%s) (%s) > 0", byFinding, r.agt("lockgov_findings", `kind="`+kind+`"`))
	return r.alert(name, severity, expr, summary, description)
}

func (r builder) locks() []Rule {
	t := r.cfg.Thresholds
	return []Rule{
		r.finding("LockgovLockImmortal", Critical, "immortal",
			"A lock key has no TTL and will never expire.",
			"The agent's {{ $labels.detector }} detector found lock keys of kind {{ $labels.kind }}: no TTL, so if the holder dies every waiter waits forever. The agent's /api/v1/findings lists the keys."),
		r.finding("LockgovLockHolderDead", Warning, "holder_dead",
			"A lock is held by an instance whose heartbeats stopped.",
			"The agent's {{ $labels.detector }} detector found locks of kind {{ $labels.kind }}: their holder stopped publishing heartbeats, so the lock stays taken until its TTL ends."),
		r.finding("LockgovLockHoldTooLong", Warning, "held_too_long",
			"A lock is held longer than its pattern's max hold.",
			"The agent's {{ $labels.detector }} detector found locks of kind {{ $labels.kind }}: acquired longer ago than the policy's max_hold for their pattern."),
		r.alert("LockgovLockLostWhileHeld", Warning,
			fmt.Sprintf("sum by (%s) (increase(%s[%s])) > 0", byPattern, r.svc("lockgov_lock_lost_total"), r.w),
			"Leases on {{ $labels.lock_pattern }} ended without Release.",
			"Job {{ $labels.job }} lost leases on {{ $labels.lock_pattern }} ({{ $labels.backend }}): they expired, were deleted or taken over while held. Work after the loss may have run without mutual exclusion; only the fence protects it."),
		r.alert("LockgovLockStoreDegraded", Critical,
			fmt.Sprintf("sum by (%s) (increase(%s[%s])) > 0", byService, r.svc("lockgov_store_degraded_total", `component="lock"`), r.w),
			"{{ $labels.job }} grants locks without their store (fail open).",
			"Job {{ $labels.job }} could not reach its lock store and granted process-local locks (instrument.FailOpen): mutual exclusion holds only inside each process, so two instances may run the same critical section."),
		r.alert("LockgovLockAcquireFailuresHigh", Warning,
			fmt.Sprintf("%s > %v", selector(AcquireFailRatio, ""), t.AcquireFailureRatio),
			"Many acquires of {{ $labels.lock_pattern }} fail.",
			fmt.Sprintf("More than %v%% of acquires of {{ $labels.lock_pattern }} ({{ $labels.backend }}) by job {{ $labels.job }} end in error or not_acquired.", t.AcquireFailureRatio*100)),
		r.alert("LockgovLockWaitHigh", Warning,
			fmt.Sprintf("%s > %v", selector(AcquireP99, ""), seconds(t.AcquireWaitP99)),
			"Acquires of {{ $labels.lock_pattern }} wait long.",
			fmt.Sprintf("The p99 acquire time of {{ $labels.lock_pattern }} ({{ $labels.backend }}) in job {{ $labels.job }} is above %s: callers queue behind its holders.", t.AcquireWaitP99)),
		r.alert("LockgovPolicyViolations", Warning,
			fmt.Sprintf("sum by (cluster, namespace, job, rule, mode, lock_pattern) (increase(%s[1h])) > %v", r.svc("lockgov_policy_violations_total"), t.PolicyViolationsPerHour),
			"Calls break the {{ $labels.rule }} rule on {{ $labels.lock_pattern }}.",
			"Job {{ $labels.job }} broke the {{ $labels.rule }} rule on {{ $labels.lock_pattern }} in the last hour (mode {{ $labels.mode }}: enforce refused the calls, audit let them through)."),
		r.finding("LockgovDeadlock", Critical, "deadlock",
			"Processes wait for each other's locks.",
			"The agent's {{ $labels.detector }} detector found a cycle of kind {{ $labels.kind }} in the fleet's wait-for graph: each process holds a lock another one waits for. It ends only when a wait times out or a TTL expires."),
		r.finding("LockgovLockOrderInversion", Warning, "lock_order_inversion",
			"Two code paths take the same locks in opposite orders.",
			"The agent's {{ $labels.detector }} detector found findings of kind {{ $labels.kind }}: the locks were taken in both orders, a deadlock waiting to happen."),
		r.alert("LockgovClockSkewDegraded", Warning,
			fmt.Sprintf("(%s > %v) <= %v", r.skew(), seconds(t.SkewDegrade), seconds(t.SkewReject)),
			"{{ $labels.instance }} runs in the degrade clock-skew tier.",
			fmt.Sprintf("Instance {{ $labels.instance }} of {{ $labels.service }} is between %s and %s off its store's clock: its lock TTLs are shortened and it warns.", t.SkewDegrade, t.SkewReject)),
		r.alert("LockgovClockSkewReject", Critical,
			fmt.Sprintf("%s > %v", r.skew(), seconds(t.SkewReject)),
			"{{ $labels.instance }} refuses new locks and IDs: clock skew.",
			fmt.Sprintf("Instance {{ $labels.instance }} of {{ $labels.service }} is more than %s off its store's clock: it refuses new locks and new IDs (ErrClockSkew).", t.SkewReject)),
	}
}

func (r builder) skew() string {
	return fmt.Sprintf("max by (cluster, namespace, service, instance) (abs(%s))", r.agt("lockgov_clock_skew_seconds"))
}

func (r builder) ids() []Rule {
	t := r.cfg.Thresholds
	return []Rule{
		r.finding("LockgovWorkerIDCollision", Critical, "workerid_duplicate",
			"Two instances claim one Snowflake WorkerID.",
			"The agent's {{ $labels.detector }} detector found findings of kind {{ $labels.kind }}: two live instances use one WorkerID, so they can issue duplicate IDs."),
		r.alert("LockgovWorkerLeaseLost", Critical,
			fmt.Sprintf("max by (%s) (%s) == 1", byInstance, r.svc("lockgov_id_worker_lease", `state="lost"`)),
			"{{ $labels.instance }} lost its WorkerID lease.",
			"Instance {{ $labels.instance }} of job {{ $labels.job }} lost its WorkerID lease: it issues no IDs until it claims one again."),
		r.alert("LockgovSnowflakeClockBackwards", Warning,
			fmt.Sprintf("sum by (%s) (increase(%s[%s])) > 0", byInstance, r.svc("lockgov_id_clock_backwards_total", `action="refuse"`), r.w),
			"{{ $labels.instance }} refused IDs: its clock stepped back.",
			"Instance {{ $labels.instance }} of job {{ $labels.job }} saw its wall clock step back further than it waits for, and refused to issue IDs."),
		r.alert("LockgovSnowflakeLifetimeLow", Warning,
			fmt.Sprintf("min by (%s) (%s) < %v", byService, r.svc("lockgov_id_lifetime_remaining_seconds"), seconds(t.SnowflakeLifetimeLow)),
			"The Snowflake layout of {{ $labels.job }} runs out of time bits.",
			fmt.Sprintf("Job {{ $labels.job }} has less than %s left before its ID layout's timestamp overflows.", t.SnowflakeLifetimeLow)),
	}
}

// storeErrors fires on a share of failed requests of a store-backed
// component or on any decision taken without its store (fail open).
func (r builder) storeErrors(metric, failed string, ratio float64, component string) string {
	return fmt.Sprintf("(\n  sum by (%[1]s) (rate(%[2]s[%[3]s]))\n  /\n  sum by (%[1]s) (rate(%[4]s[%[3]s]))\n  > %[5]v\n)\nor\nsum by (%[1]s) (increase(%[6]s[%[3]s])) > 0",
		byService, r.svc(metric, failed), r.w, r.svc(metric), ratio, r.svc("lockgov_store_degraded_total", `component="`+component+`"`))
}

func (r builder) tokens() []Rule {
	t := r.cfg.Thresholds
	return []Rule{
		r.alert("LockgovIdempotencyStoreErrors", Warning,
			r.storeErrors("lockgov_idempotency_requests_total", `outcome=~"error|not_replicated"`, t.IdempotencyErrorRatio, "idempotency"),
			"The idempotency store of {{ $labels.job }} fails.",
			fmt.Sprintf("Job {{ $labels.job }}: more than %v%% of idempotent requests end in error or with a record too few replicas acknowledged (WithReplicaAcks), or requests were served without the store (fail open): a retried request may run twice.", t.IdempotencyErrorRatio*100)),
		r.alert("LockgovQuotaDeductErrors", Warning,
			r.storeErrors("lockgov_quota_deduct_total", `result=~"error|not_replicated"`, t.QuotaErrorRatio, "quota"),
			"Quota deductions of {{ $labels.job }} fail.",
			fmt.Sprintf("Job {{ $labels.job }}: more than %v%% of quota deductions end in error or unacknowledged by enough replicas (WithReplicaAcks), or deductions were decided without the store (fail open).", t.QuotaErrorRatio*100)),
	}
}

func (r builder) agent() []Rule {
	t := r.cfg.Thresholds
	return []Rule{
		r.alert("LockgovAgentDown", Warning,
			fmt.Sprintf("absent(%s == 1)", r.agt("up")),
			"No lockgov agent is up.",
			fmt.Sprintf("Prometheus scrapes no lockgov agent matching job=~%q: immortal locks, skew and WorkerID collisions go unseen.", r.cfg.Selectors.AgentJob)),
		r.alert("LockgovAgentScanFailing", Warning,
			fmt.Sprintf("sum by (cluster, namespace, job) (increase(%s[%s])) == 0", r.agt("lockgov_agent_scan_duration_seconds_count"), t.AgentScanMissing),
			"The lockgov agents of {{ $labels.job }} completed no scan.",
			fmt.Sprintf("Agents of job {{ $labels.job }} completed no scan in %s: no leader, or every scan fails. Findings are stale.", t.AgentScanMissing)),
		r.alert("LockgovAgentScanIncomplete", Warning,
			fmt.Sprintf("time() - max by (cluster, namespace, job, detector, store) (%s) > %v",
				r.agt("lockgov_agent_detector_last_success_timestamp_seconds"), seconds(t.AgentScanMissing)),
			"The {{ $labels.detector }} detector of the lockgov agents completed no scan for long.",
			fmt.Sprintf("The leading agent of job {{ $labels.job }} has not seen its {{ $labels.detector }} detector complete a scan in %s, or not at all since it took the lead (a slow or failing store, a scan timeout too short for the keyspace; the store label, when there is one, is the store it reads). Its findings are kept, stale, from its last completed scan: new leaked locks, collisions and deadlocks it would find go unseen.", t.AgentScanMissing)),
		r.alert("LockgovAgentStoreDown", Warning,
			fmt.Sprintf("%s == 0", r.agt("lockgov_agent_store_up")),
			"Agent {{ $labels.instance }} cannot reach store {{ $labels.store }}.",
			"Agent {{ $labels.instance }} of job {{ $labels.job }} cannot reach store {{ $labels.store }}: its /readyz is 503 and the store's locks go unwatched."),
		r.finding("LockgovStoreEvictionEnabled", Warning, "eviction_enabled",
			"A lock store deletes keys when its memory is full.",
			"The agent's {{ $labels.detector }} detector found a Redis store with maxmemory and a maxmemory-policy other than noeviction (kind {{ $labels.kind }}): when its memory fills, Redis deletes held locks, idempotency records and quota records. The agent's /api/v1/findings names the store."),
		r.alert("LockgovStoreEvictingKeys", Critical,
			fmt.Sprintf("sum by (cluster, namespace, job, store) (increase(%s[%s])) > 0", r.agt("lockgov_agent_store_evicted_keys_total"), r.w),
			"Store {{ $labels.store }} is evicting keys.",
			"Redis store {{ $labels.store }} evicted keys under maxmemory (seen by the agents of job {{ $labels.job }}): held locks may have been taken by a second holder before the first renewed, completed idempotency keys may run again, retried quota deductions may apply twice."),
	}
}

// seconds renders d as a PromQL number of seconds.
func seconds(d model.Duration) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", float64(d)/1e9), "0"), ".")
}
