package alerts

// The promtool unit tests of the rules, as data: for every alert one case
// where it fires and one where it stays silent. TestRules_PromtoolTests
// renders them into testdata/lockgov.rules.test.yaml beside the rendered
// rules, with the expected annotations expanded from the rules' own
// templates, and runs promtool on both.

type series struct {
	labels string // PromQL selector syntax
	values string // promtool expanding notation
}

type ruleCase struct {
	alert  string
	fires  bool
	input  []series
	at     string              // eval_time
	labels []map[string]string // the alerts expected (without alertname and severity) when fires
}

const (
	svc = `job="payments",instance="pay-0"`
	agt = `job="lockgov-agent",instance="agent-0"`
	pat = `backend="redis",lock_pattern="lock:order:{id}"`
)

var patternLabels = map[string]string{"job": "payments", "backend": "redis", "lock_pattern": "lock:order:{id}"}

// findingCases: the alert fires on an open finding of its kind, and not on
// a closed one of its kind next to an open one of another kind.
func findingCases(alert, kind, other string) []ruleCase {
	open := func(k, v string) series {
		return series{`lockgov_findings{` + agt + `,detector="d",kind="` + k + `",severity="critical"}`, v}
	}
	return []ruleCase{
		{alert: alert, fires: true, input: []series{open(kind, "1x40")}, at: "20m",
			labels: []map[string]string{{"detector": "d", "kind": kind}}},
		{alert: alert, input: []series{open(kind, "0x40"), open(other, "1x40")}, at: "20m"},
	}
}

func cases() []ruleCase {
	var cs []ruleCase
	cs = append(cs, findingCases("LockgovLockImmortal", "immortal", "ttl_above_max")...)
	cs = append(cs, findingCases("LockgovLockHolderDead", "holder_dead", "immortal")...)
	cs = append(cs, findingCases("LockgovLockHoldTooLong", "held_too_long", "holder_dead")...)
	cs = append(cs, findingCases("LockgovDeadlock", "deadlock", "lock_order_inversion")...)
	cs = append(cs, findingCases("LockgovLockOrderInversion", "lock_order_inversion", "deadlock")...)
	cs = append(cs, findingCases("LockgovWorkerIDCollision", "workerid_duplicate", "workerid_out_of_range")...)
	cs = append(cs, findingCases("LockgovStoreEvictionEnabled", "eviction_enabled", "eviction_unknown")...)

	acquire := func(result, v string) series {
		return series{`lockgov_lock_acquire_total{` + svc + `,` + pat + `,result="` + result + `"}`, v}
	}
	bucket := func(le, v string) series {
		return series{`lockgov_lock_acquire_duration_seconds_bucket{` + svc + `,` + pat + `,result="acquired",le="` + le + `"}`, v}
	}
	skew := func(v string) series {
		return series{`lockgov_clock_skew_seconds{job="lockgov-agent",service="payments",instance="pay-0"}`, v}
	}
	skewLabels := []map[string]string{{"service": "payments", "instance": "pay-0"}}
	instance := []map[string]string{{"job": "payments", "instance": "pay-0"}}
	job := []map[string]string{{"job": "payments"}}
	cs = append(cs,
		ruleCase{alert: "LockgovLockLostWhileHeld", fires: true, at: "10m", labels: []map[string]string{patternLabels},
			input: []series{{`lockgov_lock_lost_total{` + svc + `,` + pat + `}`, "0+1x20"}}},
		ruleCase{alert: "LockgovLockLostWhileHeld", at: "10m",
			input: []series{{`lockgov_lock_lost_total{` + svc + `,` + pat + `}`, "5x20"}}},

		ruleCase{alert: "LockgovLockAcquireFailuresHigh", fires: true, at: "20m", labels: []map[string]string{patternLabels},
			input: []series{acquire("acquired", "0+10x30"), acquire("error", "0+1x30")}},
		ruleCase{alert: "LockgovLockAcquireFailuresHigh", at: "20m",
			input: []series{acquire("acquired", "0+10x30"), acquire("error", "0x30"), acquire("not_acquired", "0x30")}},

		ruleCase{alert: "LockgovLockWaitHigh", fires: true, at: "20m", labels: []map[string]string{patternLabels},
			input: []series{bucket("0.5", "0x30"), bucket("5", "0+10x30"), bucket("+Inf", "0+10x30")}},
		ruleCase{alert: "LockgovLockWaitHigh", at: "20m",
			input: []series{bucket("0.5", "0+10x30"), bucket("5", "0+10x30"), bucket("+Inf", "0+10x30")}},

		ruleCase{alert: "LockgovPolicyViolations", fires: true, at: "80m",
			labels: []map[string]string{{"job": "payments", "rule": "timeout", "mode": "audit", "lock_pattern": "lock:order:{id}"}},
			input:  []series{{`lockgov_policy_violations_total{` + svc + `,rule="timeout",mode="audit",lock_pattern="lock:order:{id}"}`, "0+1x90"}}},
		ruleCase{alert: "LockgovPolicyViolations", at: "80m",
			input: []series{{`lockgov_policy_violations_total{` + svc + `,rule="timeout",mode="audit",lock_pattern="lock:order:{id}"}`, "3x90"}}},

		ruleCase{alert: "LockgovClockSkewDegraded", fires: true, at: "10m", labels: skewLabels, input: []series{skew("-0.2x20")}},
		ruleCase{alert: "LockgovClockSkewDegraded", at: "10m", input: []series{skew("0.05x20")}},
		ruleCase{alert: "LockgovClockSkewDegraded", at: "10m", input: []series{skew("0.7x20")}},
		ruleCase{alert: "LockgovClockSkewReject", fires: true, at: "10m", labels: skewLabels, input: []series{skew("0.7x20")}},
		ruleCase{alert: "LockgovClockSkewReject", at: "10m", input: []series{skew("-0.3x20")}},

		ruleCase{alert: "LockgovWorkerLeaseLost", fires: true, at: "5m", labels: instance,
			input: []series{{`lockgov_id_worker_lease{` + svc + `,state="lost"}`, "1x10"}, {`lockgov_id_worker_lease{` + svc + `,state="held"}`, "0x10"}}},
		ruleCase{alert: "LockgovWorkerLeaseLost", at: "5m",
			input: []series{{`lockgov_id_worker_lease{` + svc + `,state="lost"}`, "0x10"}, {`lockgov_id_worker_lease{` + svc + `,state="held"}`, "1x10"}}},

		ruleCase{alert: "LockgovSnowflakeClockBackwards", fires: true, at: "5m", labels: instance,
			input: []series{{`lockgov_id_clock_backwards_total{` + svc + `,action="refuse"}`, "0+1x10"}}},
		ruleCase{alert: "LockgovSnowflakeClockBackwards", at: "5m",
			input: []series{{`lockgov_id_clock_backwards_total{` + svc + `,action="refuse"}`, "0x10"}, {`lockgov_id_clock_backwards_total{` + svc + `,action="wait"}`, "0+1x10"}}},

		ruleCase{alert: "LockgovSnowflakeLifetimeLow", fires: true, at: "70m", labels: job,
			input: []series{{`lockgov_id_lifetime_remaining_seconds{` + svc + `}`, "1000000x80"}}},
		ruleCase{alert: "LockgovSnowflakeLifetimeLow", at: "70m",
			input: []series{{`lockgov_id_lifetime_remaining_seconds{` + svc + `}`, "1000000000x80"}}},

		ruleCase{alert: "LockgovIdempotencyStoreErrors", fires: true, at: "15m", labels: job,
			input: []series{{`lockgov_idempotency_requests_total{` + svc + `,outcome="first"}`, "0+100x20"}, {`lockgov_idempotency_requests_total{` + svc + `,outcome="error"}`, "0+10x20"}}},
		ruleCase{alert: "LockgovIdempotencyStoreErrors", at: "15m",
			input: []series{{`lockgov_idempotency_requests_total{` + svc + `,outcome="first"}`, "0+100x20"}, {`lockgov_idempotency_requests_total{` + svc + `,outcome="error"}`, "0x20"},
				{`lockgov_store_degraded_total{` + svc + `,component="quota"}`, "0+1x20"}}},

		ruleCase{alert: "LockgovLockStoreDegraded", fires: true, at: "10m", labels: job,
			input: []series{{`lockgov_store_degraded_total{` + svc + `,component="lock"}`, "0+1x20"}}},
		ruleCase{alert: "LockgovLockStoreDegraded", at: "10m",
			input: []series{{`lockgov_store_degraded_total{` + svc + `,component="lock"}`, "5x20"}, {`lockgov_store_degraded_total{` + svc + `,component="quota"}`, "0+1x20"}}},

		// WithReplicaAcks: replicas lag, deductions run on the primary only
		// and callers are told to retry.
		ruleCase{alert: "LockgovQuotaDeductErrors", fires: true, at: "15m", labels: job,
			input: []series{{`lockgov_quota_deduct_total{` + svc + `,result="ok"}`, "0+100x20"}, {`lockgov_quota_deduct_total{` + svc + `,result="not_replicated"}`, "0+10x20"}}},
		ruleCase{alert: "LockgovIdempotencyStoreErrors", fires: true, at: "15m", labels: job,
			input: []series{{`lockgov_idempotency_requests_total{` + svc + `,outcome="first"}`, "0+100x20"}, {`lockgov_idempotency_requests_total{` + svc + `,outcome="not_replicated"}`, "0+10x20"}}},

		// Fail open: no errors, but deductions decided without the store.
		ruleCase{alert: "LockgovQuotaDeductErrors", fires: true, at: "15m", labels: job,
			input: []series{{`lockgov_quota_deduct_total{` + svc + `,result="ok"}`, "0+100x20"}, {`lockgov_store_degraded_total{` + svc + `,component="quota"}`, "0+1x20"}}},
		ruleCase{alert: "LockgovQuotaDeductErrors", at: "15m",
			input: []series{{`lockgov_quota_deduct_total{` + svc + `,result="ok"}`, "0+100x20"}, {`lockgov_quota_deduct_total{` + svc + `,result="error"}`, "0x20"}}},

		// absent() keeps no labels of a regex matcher.
		ruleCase{alert: "LockgovAgentDown", fires: true, at: "10m", labels: []map[string]string{{}},
			input: []series{{`up{` + agt + `}`, "0x20"}}},
		ruleCase{alert: "LockgovAgentDown", at: "10m", input: []series{{`up{` + agt + `}`, "1x20"}, {`up{job="lockgov-agent",instance="agent-1"}`, "0x20"}}},

		ruleCase{alert: "LockgovAgentScanFailing", fires: true, at: "20m", labels: []map[string]string{{"job": "lockgov-agent"}},
			input: []series{{`lockgov_agent_scan_duration_seconds_count{` + agt + `}`, "5x30"}}},
		ruleCase{alert: "LockgovAgentScanFailing", at: "20m",
			input: []series{{`lockgov_agent_scan_duration_seconds_count{` + agt + `}`, "0+1x30"}}},

		// A detector that last completed at 1m (its findings kept, stale,
		// since) fires at 11m + for; one that completes every scan, and
		// another detector of the same leader, do not.
		ruleCase{alert: "LockgovAgentScanIncomplete", fires: true, at: "20m",
			labels: []map[string]string{{"job": "lockgov-agent", "detector": "locks", "store": "redis-main"}},
			input: []series{
				{`lockgov_agent_detector_last_success_timestamp_seconds{` + agt + `,detector="locks",store="redis-main"}`, "60x40"},
				{`lockgov_agent_detector_last_success_timestamp_seconds{` + agt + `,detector="clock",store=""}`, "0+60x40"},
			}},
		// A new leader that has not seen the detector complete exports 0
		// (promtool's clock starts at 0 too: the rule holds from 10m on).
		ruleCase{alert: "LockgovAgentScanIncomplete", fires: true, at: "20m",
			labels: []map[string]string{{"job": "lockgov-agent", "detector": "workerid"}},
			input:  []series{{`lockgov_agent_detector_last_success_timestamp_seconds{` + agt + `,detector="workerid"}`, "0x40"}}},
		ruleCase{alert: "LockgovAgentScanIncomplete", at: "20m",
			input: []series{{`lockgov_agent_detector_last_success_timestamp_seconds{` + agt + `,detector="locks",store="redis-main"}`, "0+60x40"}}},

		ruleCase{alert: "LockgovAgentStoreDown", fires: true, at: "10m",
			labels: []map[string]string{{"job": "lockgov-agent", "instance": "agent-0", "store": "redis-main"}},
			input:  []series{{`lockgov_agent_store_up{` + agt + `,store="redis-main"}`, "0x15"}}},
		ruleCase{alert: "LockgovAgentStoreDown", at: "10m",
			input: []series{{`lockgov_agent_store_up{` + agt + `,store="redis-main"}`, "1x15"}}},
		// Evictions counted by the leader, which changes at 5m: the new
		// leader's series starts at 0 and rises.
		ruleCase{alert: "LockgovStoreEvictingKeys", fires: true, at: "10m",
			labels: []map[string]string{{"job": "lockgov-agent", "store": "redis-main"}},
			input: []series{
				{`lockgov_agent_store_evicted_keys_total{` + agt + `,store="redis-main"}`, "0x5"},
				{`lockgov_agent_store_evicted_keys_total{job="lockgov-agent",instance="agent-1",store="redis-main"}`, "_x5 0 0 0 12 12 12"},
			}},
		// A count that stopped rising (and another store's that never
		// rose) is quiet.
		ruleCase{alert: "LockgovStoreEvictingKeys", at: "20m",
			input: []series{
				{`lockgov_agent_store_evicted_keys_total{` + agt + `,store="redis-main"}`, "0 40 40x18"},
				{`lockgov_agent_store_evicted_keys_total{` + agt + `,store="redis-other"}`, "0x20"},
			}},
	)
	return cs
}
