package dashboards

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/lockgov/lockgov/alerts"
	"github.com/lockgov/lockgov/internal/mixin"
	"github.com/prometheus/common/model"
)

// Dashboard UIDs: stable, so links and GitOps diffs survive regeneration.
const (
	UIDLocksOverview = "lockgov-locks-overview"
	UIDLockPattern   = "lockgov-lock-pattern"
	UIDIDs           = "lockgov-ids"
	UIDAgentFleet    = "lockgov-agent-fleet"
	UIDTokensQuota   = "lockgov-tokens-quota"
)

// Dashboard is one generated dashboard and the file name it is written to.
type Dashboard struct {
	File      string // e.g. "lockgov-locks-overview.json"
	Dashboard dashboard.Dashboard
}

// All builds every dashboard for cfg, in a fixed order.
func All(cfg mixin.Config) ([]Dashboard, error) {
	var out []Dashboard
	for _, build := range []func(mixin.Config) *board{locksOverview, lockPattern, ids, agentFleet, tokensQuota} {
		b := build(cfg)
		d, err := b.db.Build()
		if err != nil {
			return nil, fmt.Errorf("dashboards: %w", err)
		}
		out = append(out, Dashboard{File: *d.Uid + ".json", Dashboard: d})
	}
	return out, nil
}

// JSON renders d as Grafana reads it: indented, byte-identical for equal
// dashboards.
func JSON(d dashboard.Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboards: %w", err)
	}
	return append(b, '\n'), nil
}

func rate(sel string) string { return "rate(" + sel + "[$__rate_interval])" }
func incr(sel string) string { return "increase(" + sel + "[$__rate_interval])" }

func locksOverview(cfg mixin.Config) *board {
	b := newBoard(cfg, UIDLocksOverview, "lockgov / Locks overview",
		"Governed locks of every service: acquire rate, success, latency, holds, losses and policy violations.", "locks")
	acq := b.svc("lockgov_lock_acquire_total")
	b.add(b.timeseries(12, "Acquire rate by result", "Acquire calls per second by result (acquired, reentered, not_acquired, error, refused).", "reqps",
		q("sum by (result) ("+rate(acq)+")", "{{result}}")))
	b.add(floor(b.timeseries(12, "Acquire success ratio", "Share of acquires that got the lock (acquired or reentered); red below the LockgovLockAcquireFailuresHigh threshold.", "percentunit",
		q(`sum(`+rate(b.svc("lockgov_lock_acquire_total", `result=~"acquired|reentered"`))+`) / sum(`+rate(acq)+`)`, "success")).Min(0).Max(1),
		1-cfg.Thresholds.AcquireFailureRatio))
	b.add(b.timeseries(12, "Acquire latency p50 / p99", "Time from Acquire to its result, waiting included, per pattern (recording rules); the all-pattern p99 carries trace exemplars.", "s",
		q("max by (lock_pattern) ("+selector(alerts.AcquireP99, b.cfg.Selector())+")", "p99 {{lock_pattern}}"),
		q("max by (lock_pattern) ("+selector(alerts.AcquireP50, b.cfg.Selector())+")", "p50 {{lock_pattern}}"),
		query{expr: "histogram_quantile(0.99, sum by (le) (" + rate(b.svc("lockgov_lock_acquire_duration_seconds_bucket")) + "))", legend: "p99 all (exemplars)", exemplar: true}))
	b.add(b.heatmap(12, "Hold time", "How long leases were held, until release, loss or leak.", "s",
		query{expr: "sum by (le) (" + incr(b.svc("lockgov_lock_hold_duration_seconds_bucket")) + ")", legend: "{{le}}", heatmap: true}))
	b.add(b.timeseries(12, "Held and waiting", "Leases held and Acquire calls waiting, per pattern.", "short",
		q("sum by (lock_pattern) ("+b.svc("lockgov_lock_held")+")", "held {{lock_pattern}}"),
		q("sum by (lock_pattern) ("+b.svc("lockgov_lock_waiters")+")", "waiting {{lock_pattern}}")))
	b.add(b.timeseries(12, "Lost and leaked leases", "Leases that ended without Release (lost) and leases garbage-collected while held (leaked).", "short",
		q("sum by (lock_pattern) ("+incr(b.svc("lockgov_lock_lost_total"))+")", "lost {{lock_pattern}}"),
		q("sum by (lock_pattern) ("+incr(b.svc("lockgov_lease_leaked_total"))+")", "leaked {{lock_pattern}}")))
	b.add(b.timeseries(12, "Policy violations by rule", "Calls that broke a governance rule, by rule and mode (enforce refused them, audit counted them).", "short",
		q("sum by (rule, mode) ("+incr(b.svc("lockgov_policy_violations_total"))+")", "{{rule}} ({{mode}})")))
	b.add(b.timeseries(12, "Hold time p99 by pattern", "p99 of hold time per pattern (recording rule).", "s",
		q("max by (lock_pattern) ("+selector(alerts.HoldP99, b.cfg.Selector())+")", "{{lock_pattern}}")))
	return b
}

func lockPattern(cfg mixin.Config) *board {
	b := newBoard(cfg, UIDLockPattern, "lockgov / Lock pattern",
		"One lock pattern (the lock_pattern variable): acquires, latency, failures, holds, renewals and losses.", "locks")
	b.db.WithVariable(dashboard.NewQueryVariableBuilder("lock_pattern").
		Label("Lock pattern").
		Datasource(datasource).
		Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(" + b.svc("lockgov_lock_acquire_total") + ", lock_pattern)")}).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true))
	b.extra = []string{`lock_pattern=~"$lock_pattern"`}
	rec := func(name string) string { return selector(name, b.cfg.Selector(b.extra...)) }
	b.add(b.timeseries(12, "Acquire rate by result", "Acquire calls per second by result.", "reqps",
		q("sum by (lock_pattern, result) ("+rate(b.svc("lockgov_lock_acquire_total"))+")", "{{lock_pattern}} {{result}}")))
	b.add(thresholds(b.timeseries(12, "Acquire failure ratio", "Share of acquires ending in error or not_acquired (recording rule); the line is the LockgovLockAcquireFailuresHigh threshold.", "percentunit",
		q("max by (lock_pattern, backend) ("+rec(alerts.AcquireFailRatio)+")", "{{lock_pattern}} ({{backend}})")).Min(0),
		step{cfg.Thresholds.AcquireFailureRatio, "red"}))
	b.add(thresholds(b.timeseries(12, "Acquire latency p50 / p99", "Time from Acquire to its result (recording rules); the line is the LockgovLockWaitHigh threshold.", "s",
		q("max by (lock_pattern) ("+rec(alerts.AcquireP99)+")", "p99 {{lock_pattern}}"),
		q("max by (lock_pattern) ("+rec(alerts.AcquireP50)+")", "p50 {{lock_pattern}}")),
		step{seconds(cfg.Thresholds.AcquireWaitP99), "red"}))
	b.add(b.timeseries(12, "Hold time p99", "p99 of hold time (recording rule).", "s",
		q("max by (lock_pattern) ("+rec(alerts.HoldP99)+")", "{{lock_pattern}}")))
	b.add(b.timeseries(12, "Held and waiting", "Leases held and Acquire calls waiting, per instance.", "short",
		q("sum by (instance) ("+b.svc("lockgov_lock_held")+")", "held {{instance}}"),
		q("sum by (instance) ("+b.svc("lockgov_lock_waiters")+")", "waiting {{instance}}")))
	b.add(b.timeseries(12, "Renewals by result", "Watchdog renewals: ok, lost (ownership proven gone), error (not confirmed).", "short",
		q("sum by (result) ("+incr(b.svc("lockgov_lock_renewals_total"))+")", "{{result}}")))
	b.add(b.timeseries(12, "Lost and leaked leases", "Leases lost while held, and leases garbage-collected while held.", "short",
		q("sum by (instance) ("+incr(b.svc("lockgov_lock_lost_total"))+")", "lost {{instance}}"),
		q("sum by (instance) ("+incr(b.svc("lockgov_lease_leaked_total"))+")", "leaked {{instance}}")))
	b.add(b.timeseries(12, "Policy violations by rule", "Calls that broke a governance rule on this pattern.", "short",
		q("sum by (rule, mode) ("+incr(b.svc("lockgov_policy_violations_total"))+")", "{{rule}} ({{mode}})")))
	return b
}

func ids(cfg mixin.Config) *board {
	b := newBoard(cfg, UIDIDs, "lockgov / IDs",
		"Snowflake ID generators: rate, clock-backwards waits and refusals, sequence exhaustion, WorkerID leases and layout lifetime.", "ids")
	b.add(b.timeseries(12, "IDs generated", "IDs per second by job.", "ops",
		q("sum by (job) ("+rate(b.svc("lockgov_id_generated_total"))+")", "{{job}}")))
	b.add(b.timeseries(12, "Clock backwards", "Backwards clock steps by action: wait (up to 5 ms) or refuse (IDs refused).", "short",
		q("sum by (job, action) ("+incr(b.svc("lockgov_id_clock_backwards_total"))+")", "{{job}} {{action}}"),
		q("histogram_quantile(0.99, sum by (le) ("+rate(b.svc("lockgov_id_clock_backwards_seconds_bucket"))+"))", "p99 step back (s)")))
	b.add(b.timeseries(12, "Sequence exhausted", "Milliseconds whose sequence numbers ran out, so a caller waited for the next.", "short",
		q("sum by (job) ("+incr(b.svc("lockgov_id_sequence_exhausted_total"))+")", "{{job}}")))
	b.add(b.timeseries(12, "WorkerID lease state", "Instances per WorkerID lease state (none, held, lost).", "short",
		q("sum by (state) ("+b.svc("lockgov_id_worker_lease")+")", "{{state}}")))
	b.add(floor(b.timeseries(24, "Layout lifetime left", "Time until the ID layout runs out of timestamp bits; the line is the LockgovSnowflakeLifetimeLow threshold.", "s",
		q("min by (job) ("+b.svc("lockgov_id_lifetime_remaining_seconds")+")", "{{job}}")),
		seconds(cfg.Thresholds.SnowflakeLifetimeLow)))
	return b
}

func agentFleet(cfg mixin.Config) *board {
	b := newBoard(cfg, UIDAgentFleet, "lockgov / Agent and fleet",
		"The governance agent: findings, clock skew per instance with the tiers, WorkerID collisions, scan health, leader and stores.", "agent")
	b.add(b.timeseries(12, "Findings by kind", "Open findings of the last scan (max over agents: followers serve the leader's).", "short",
		q("max by (kind, severity) ("+b.agt("lockgov_findings")+")", "{{kind}} ({{severity}})")))
	b.add(thresholds(b.timeseries(12, "Clock skew per instance", "|offset| of each instance to its store; dashed lines are the degrade and reject tiers.", "s",
		q("max by (service, instance) (abs("+b.agt("lockgov_clock_skew_seconds")+"))", "{{service}} {{instance}}")).Min(0),
		step{seconds(cfg.Thresholds.SkewDegrade), "orange"}, step{seconds(cfg.Thresholds.SkewReject), "red"}))
	b.add(b.timeseries(12, "WorkerID findings", "WorkerID duplicates (collisions), leases gone, ids out of range, overlapping ranges.", "short",
		q("max by (kind) ("+b.agt("lockgov_findings", `kind=~"workerid_.*"`)+")", "{{kind}}")))
	b.add(b.timeseries(12, "Scan health", "p99 scan duration (recording rule) and keys read per second.", "s",
		q("max by (job) ("+selector(alerts.ScanP99, b.cfg.AgentSelector())+")", "scan p99 {{job}}"),
		q("sum by (instance) ("+rate(b.agt("lockgov_agent_keys_scanned_total"))+")", "keys/s {{instance}}")))
	b.add(b.stat(12, "Leader", "Agents leading (1) or following (0).", "short",
		q("max by (instance) ("+b.agt("lockgov_agent_leader")+")", "{{instance}}")))
	b.add(b.stat(12, "Stores up", "1 while the agent reaches the store.", "short",
		q("min by (store) ("+b.agt("lockgov_agent_store_up")+")", "{{store}}")))
	b.add(b.timeseries(12, "Store eviction", "Keys each Redis store evicted under maxmemory per second, and 1 for a store whose maxmemory-policy is not noeviction (unknown: INFO refused). With maxmemory set, lockgov's keys are eviction candidates: see the eviction_enabled finding.", "short",
		q("sum by (store) ("+rate(b.agt("lockgov_agent_store_evicted_keys_total"))+")", "evicted/s {{store}}"),
		q("max by (store, policy) ("+b.agt("lockgov_agent_store_maxmemory_policy", `policy!="noeviction"`)+")", "{{policy}} {{store}}")))
	return b
}

func tokensQuota(cfg mixin.Config) *board {
	b := newBoard(cfg, UIDTokensQuota, "lockgov / Tokens and quota",
		"Idempotency tokens and quota deductions: outcomes, error ratios and decisions taken without the store.", "idempotency", "quota")
	idem := b.svc("lockgov_idempotency_requests_total")
	quota := b.svc("lockgov_quota_deduct_total")
	b.add(b.timeseries(12, "Idempotent requests by outcome", "first run, replay of a stored result, in progress, fingerprint mismatch, error.", "reqps",
		q("sum by (outcome) ("+rate(idem)+")", "{{outcome}}")))
	b.add(thresholds(b.timeseries(12, "Idempotency error ratio", "Share of requests ending in error or not replicated (WithReplicaAcks), as LockgovIdempotencyStoreErrors counts them; the line is its threshold.", "percentunit",
		q("sum by (job) ("+rate(b.svc("lockgov_idempotency_requests_total", `outcome=~"error|not_replicated"`))+") / sum by (job) ("+rate(idem)+")", "{{job}}")).Min(0),
		step{cfg.Thresholds.IdempotencyErrorRatio, "red"}))
	b.add(b.timeseries(12, "Quota deductions by result", "Deductions per second by result.", "reqps",
		q("sum by (result) ("+rate(quota)+")", "{{result}}")))
	b.add(thresholds(b.timeseries(12, "Quota error ratio", "Share of deductions ending in error or not replicated (WithReplicaAcks), as LockgovQuotaDeductErrors counts them; the line is its threshold.", "percentunit",
		q("sum by (job) ("+rate(b.svc("lockgov_quota_deduct_total", `result=~"error|not_replicated"`))+") / sum by (job) ("+rate(quota)+")", "{{job}}")).Min(0),
		step{cfg.Thresholds.QuotaErrorRatio, "red"}))
	b.add(b.timeseries(24, "Decisions without the store", "Decisions taken while the store failed under a fail-open policy, by component.", "short",
		q("sum by (job, component) ("+incr(b.svc("lockgov_store_degraded_total"))+")", "{{job}} {{component}}")))
	return b
}

func seconds(d model.Duration) float64 { return time.Duration(d).Seconds() }
