package telemetry

import "slices"

// Kind is a Prometheus metric type.
type Kind uint8

// Metric kinds.
const (
	Counter Kind = iota + 1
	Gauge
	Histogram
)

func (k Kind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Histogram:
		return "histogram"
	}
	return "unknown"
}

// Metric is one row of the table.
type Metric struct {
	Name      string
	Kind      Kind
	Help      string
	Labels    []string
	Buckets   []float64 // histograms only
	Component string    // who emits it: lock, id, fleet, agent, idempotency, quota, store
	// Values documents the fixed values of labels that have them (result,
	// rule, state...), in the order the README lists them.
	Values map[string][]string
	// Planned names the issue whose code will emit a metric that nothing
	// emits yet. Such rows let alert rules and dashboards be written ahead;
	// the README leaves them out, since no process exports them.
	Planned string
}

// Buckets shared by the histograms below.
var (
	acquireBuckets   = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	holdBuckets      = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600}
	backwardsBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.1, 0.5, 1, 10}
	scanBuckets      = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
)

// Lock metrics (instrument.Govern).
var (
	LockAcquireTotal = Metric{
		Name: "lockgov_lock_acquire_total", Kind: Counter, Component: "lock",
		Help:   "Lock acquisitions by result (acquired, reentered, not_acquired, error, refused).",
		Labels: []string{"backend", "lock_pattern", "result"},
		Values: map[string][]string{"result": {"acquired", "reentered", "not_acquired", "error", "refused"}},
	}
	LockAcquireDuration = Metric{
		Name: "lockgov_lock_acquire_duration_seconds", Kind: Histogram, Component: "lock",
		Help:    "Time from Acquire to its result, waiting included.",
		Labels:  []string{"backend", "lock_pattern", "result"},
		Buckets: acquireBuckets,
		Values:  map[string][]string{"result": {"acquired", "not_acquired", "error"}},
	}
	LockHoldDuration = Metric{
		Name: "lockgov_lock_hold_duration_seconds", Kind: Histogram, Component: "lock",
		Help:    "Time a lease was held, until release, loss or leak.",
		Labels:  []string{"backend", "lock_pattern"},
		Buckets: holdBuckets,
	}
	LockHeld = Metric{
		Name: "lockgov_lock_held", Kind: Gauge, Component: "lock",
		Help:   "Leases held by this process.",
		Labels: []string{"backend", "lock_pattern"},
	}
	LockWaiters = Metric{
		Name: "lockgov_lock_waiters", Kind: Gauge, Component: "lock",
		Help:   "Acquire calls of this process waiting for another holder.",
		Labels: []string{"backend", "lock_pattern"},
	}
	LockRenewalsTotal = Metric{
		Name: "lockgov_lock_renewals_total", Kind: Counter, Component: "lock",
		Help:   "Lease renewals by result (ok, lost: ownership proven gone, error: not confirmed).",
		Labels: []string{"backend", "lock_pattern", "result"},
		Values: map[string][]string{"result": {"ok", "lost", "error"}},
	}
	LockLostTotal = Metric{
		Name: "lockgov_lock_lost_total", Kind: Counter, Component: "lock",
		Help:   "Leases that ended without Release (expired, deleted, taken over).",
		Labels: []string{"backend", "lock_pattern"},
	}
	LeaseLeakedTotal = Metric{
		Name: "lockgov_lease_leaked_total", Kind: Counter, Component: "lock",
		Help:   "Leases garbage-collected while held; each was logged and released.",
		Labels: []string{"backend", "lock_pattern"},
	}
	PolicyViolationsTotal = Metric{
		Name: "lockgov_policy_violations_total", Kind: Counter, Component: "lock",
		Help:   "Calls that broke a governance rule, by rule and by the mode that judged them.",
		Labels: []string{"rule", "mode", "lock_pattern"},
		Values: map[string][]string{"rule": {"timeout", "ttl", "max_hold", "clock_skew"}, "mode": {"enforce", "audit"}},
	}
)

// ID generator metrics (snowflake metrics for any generator).
var (
	IDGeneratedTotal = Metric{
		Name: "lockgov_id_generated_total", Kind: Counter, Component: "id",
		Help: "IDs generated.",
	}
	IDClockBackwardsTotal = Metric{
		Name: "lockgov_id_clock_backwards_total", Kind: Counter, Component: "id",
		Help:   "Backwards clock steps seen by the ID generator, by action (wait, refuse).",
		Labels: []string{"action"},
		Values: map[string][]string{"action": {"wait", "refuse"}},
	}
	IDClockBackwardsSeconds = Metric{
		Name: "lockgov_id_clock_backwards_seconds", Kind: Histogram, Component: "id",
		Help:    "How far back the clock was when the ID generator saw it step back.",
		Buckets: backwardsBuckets,
	}
	IDSequenceExhaustedTotal = Metric{
		Name: "lockgov_id_sequence_exhausted_total", Kind: Counter, Component: "id",
		Help: "Milliseconds whose sequence numbers ran out, so a caller waited for the next.",
	}
	IDWorkerLease = Metric{
		Name: "lockgov_id_worker_lease", Kind: Gauge, Component: "id",
		Help:   "1 for the WorkerID lease's current state (none, held, lost), 0 for the others.",
		Labels: []string{"state"},
		Values: map[string][]string{"state": {"none", "held", "lost"}},
	}
	IDLifetimeRemaining = Metric{
		Name: "lockgov_id_lifetime_remaining_seconds", Kind: Gauge, Component: "id",
		Help: "Seconds until the ID layout runs out of time bits.",
	}
)

// Agent metrics (lockgov agent).
var (
	Findings = Metric{
		Name: "lockgov_findings", Kind: Gauge, Component: "agent",
		Help:   "Findings of the last scan by detector, kind and severity (exported by the leading agent only).",
		Labels: []string{"detector", "kind", "severity"},
		Values: map[string][]string{
			"kind": {"immortal", "ttl_above_max", "held_too_long", "holder_dead", "deadlock", "lock_order_inversion",
				"skew_degrade", "skew_reject", "workerid_duplicate", "workerid_lease_gone", "workerid_out_of_range", "workerid_range_overlap",
				"eviction_enabled", "eviction_unknown"},
			"severity": {"info", "warning", "critical"},
		},
	}
	ClockSkewSeconds = Metric{
		Name: "lockgov_clock_skew_seconds", Kind: Gauge, Component: "agent",
		Help:   "Clock offset of an instance to its store (local minus store), from its heartbeat (leading agent only).",
		Labels: []string{"service", "instance"},
	}
	AgentScanDuration = Metric{
		Name: "lockgov_agent_scan_duration_seconds", Kind: Histogram, Component: "agent",
		Help:    "Time one scan of the stores took (leading agent; a scan every read of which failed is not counted).",
		Buckets: scanBuckets,
	}
	AgentKeysScannedTotal = Metric{
		Name: "lockgov_agent_keys_scanned_total", Kind: Counter, Component: "agent",
		Help: "Keys the agent's lock inventory looked at.",
	}
	AgentLeader = Metric{
		Name: "lockgov_agent_leader", Kind: Gauge, Component: "agent",
		Help: "1 while this agent leads (scans and publishes findings), 0 while it follows.",
	}
	AgentStoreUp = Metric{
		Name: "lockgov_agent_store_up", Kind: Gauge, Component: "agent",
		Help:   "1 when the store answered the agent's last health check, 0 when not.",
		Labels: []string{"store"},
	}
	AgentStoreMaxMemoryBytes = Metric{
		Name: "lockgov_agent_store_maxmemory_bytes", Kind: Gauge, Component: "agent",
		Help:   "maxmemory of a Redis store in bytes (the largest of its nodes; 0: no limit), from INFO at the leading agent's last scan; absent while unknown (INFO refused).",
		Labels: []string{"store"},
	}
	AgentStoreMaxMemoryPolicy = Metric{
		Name: "lockgov_agent_store_maxmemory_policy", Kind: Gauge, Component: "agent",
		Help:   "1 for a Redis store's maxmemory-policy (an evicting one when its nodes differ, unknown when INFO was refused), from the leading agent's last scan.",
		Labels: []string{"store", "policy"},
		Values: map[string][]string{"policy": {"noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random",
			"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "unknown"}},
	}
	AgentDetectorLastSuccess = Metric{
		Name: "lockgov_agent_detector_last_success_timestamp_seconds", Kind: Gauge, Component: "agent",
		Help:   "Unix time at which a detector last completed a scan (leading agent; 0 when it has not since this agent took the lead, nor in the last record it served before). A detector that does not complete keeps its last findings in lockgov_findings, stale since this time.",
		Labels: []string{"detector", "store"},
	}
	AgentStoreEvictedKeysTotal = Metric{
		Name: "lockgov_agent_store_evicted_keys_total", Kind: Counter, Component: "agent",
		Help:   "Keys a Redis store evicted under maxmemory (any keys, not only lockgov's), as the leading agent saw INFO stats' evicted_keys rise between its scans.",
		Labels: []string{"store"},
	}
)

// Idempotency, quota and store-failure metrics (issue 13).
var (
	IdempotencyRequestsTotal = Metric{
		Name: "lockgov_idempotency_requests_total", Kind: Counter, Component: "idempotency",
		Help:   "Idempotent requests by outcome (first run, replay of a stored result, in progress, fingerprint mismatch, error, run without the store under fail open, a write too few replicas acknowledged under WithReplicaAcks).",
		Labels: []string{"outcome"},
		Values: map[string][]string{"outcome": {"first", "replay", "in_progress", "mismatch", "error", "degraded", "not_replicated"}},
	}
	QuotaDeductTotal = Metric{
		Name: "lockgov_quota_deduct_total", Kind: Counter, Component: "quota",
		Help:   "Quota deductions by key pattern and result (applied, insufficient, a retried request id answered from its record, a store error, bad input, decided by the caller's fallback without the store, a write too few replicas acknowledged under WithReplicaAcks).",
		Labels: []string{"key_pattern", "result"},
		Values: map[string][]string{"result": {"ok", "insufficient", "replay", "replay_insufficient", "error", "invalid", "degraded", "not_replicated"}},
	}
	StoreDegradedTotal = Metric{
		Name: "lockgov_store_degraded_total", Kind: Counter, Component: "store",
		Help:   "Decisions taken without the store under a fail-open policy or fallback, by component (lock, idempotency, quota).",
		Labels: []string{"component"},
		Values: map[string][]string{"component": {"lock", "idempotency", "quota"}},
	}
)

// Fleet metrics (the heartbeat publisher of instrument/fleet).
var (
	FleetHeartbeatsTotal = Metric{
		Name: "lockgov_fleet_heartbeats_total", Kind: Counter, Component: "fleet",
		Help:   "Heartbeats this process wrote into a lock store, by result (ok, error).",
		Labels: []string{"backend", "result"},
		Values: map[string][]string{"result": {"ok", "error"}},
	}
	ClockOffsetSeconds = Metric{
		Name: "lockgov_clock_offset_seconds", Kind: Gauge, Component: "fleet",
		Help:   "This process's wall clock minus the lock store's, from the best of several round trips (or the agent's report on etcd).",
		Labels: []string{"backend"},
	}
)

// Table is every lockgov metric, in the order the README lists them.
var Table = []Metric{
	LockAcquireTotal, LockAcquireDuration, LockHoldDuration, LockHeld, LockWaiters,
	LockRenewalsTotal, LockLostTotal, LeaseLeakedTotal, PolicyViolationsTotal,
	IDGeneratedTotal, IDClockBackwardsTotal, IDClockBackwardsSeconds, IDSequenceExhaustedTotal,
	IDWorkerLease, IDLifetimeRemaining,
	Findings, ClockSkewSeconds, AgentScanDuration, AgentKeysScannedTotal, AgentLeader, AgentStoreUp,
	AgentStoreMaxMemoryBytes, AgentStoreMaxMemoryPolicy, AgentStoreEvictedKeysTotal, AgentDetectorLastSuccess,
	FleetHeartbeatsTotal, ClockOffsetSeconds,
	IdempotencyRequestsTotal, QuotaDeductTotal, StoreDegradedTotal,
}

// Lookup returns the table row named name.
func Lookup(name string) (Metric, bool) {
	i := slices.IndexFunc(Table, func(m Metric) bool { return m.Name == name })
	if i < 0 {
		return Metric{}, false
	}
	return Table[i], true
}
