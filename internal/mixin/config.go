package mixin

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockgov/lockgov/policy"
	"github.com/prometheus/common/model"
)

// Config is the mixin's config block. The zero value is not useful: start
// from Default.
type Config struct {
	Selectors  Selectors
	Thresholds Thresholds
	// For is each alert's `for` duration, keyed by alert name. Keys are
	// exactly the names of DefaultFor.
	For map[string]model.Duration
	// RunbookBase is the URL every alert's runbook_url starts with; the
	// alert name and ".md" follow.
	RunbookBase string
}

// Selectors are regular expressions matched against the labels of every
// series the rules and dashboards read. An empty selector matches any value
// (and a missing label).
type Selectors struct {
	Job       string // services that use lockgov (instrument, snowflake, idempotency, quota)
	AgentJob  string // lockgov agents
	Cluster   string
	Namespace string
}

// Thresholds are the values alerts fire at.
type Thresholds struct {
	AcquireFailureRatio     float64        // failed (error, not_acquired) / all acquires per pattern
	AcquireWaitP99          model.Duration // p99 acquire duration per pattern
	SkewDegrade             model.Duration // |offset| above it: LockgovClockSkewDegraded
	SkewReject              model.Duration // |offset| above it: LockgovClockSkewReject
	SnowflakeLifetimeLow    model.Duration // layout time left below it
	IdempotencyErrorRatio   float64        // outcome="error" / all requests
	QuotaErrorRatio         float64        // result="error" / all deductions
	AgentScanMissing        model.Duration // no completed scan (of any detector: LockgovAgentScanIncomplete) for this long
	RateWindow              model.Duration // window of rate() and increase()
	PolicyViolationsPerHour float64        // violations per rule and pattern per hour above it (0: any)
}

// DefaultFor is the `for` duration of every alert the rules define.
var DefaultFor = map[string]model.Duration{
	"LockgovLockImmortal":            model.Duration(5 * time.Minute),
	"LockgovLockHolderDead":          model.Duration(5 * time.Minute),
	"LockgovLockHoldTooLong":         model.Duration(5 * time.Minute),
	"LockgovLockLostWhileHeld":       0,
	"LockgovLockStoreDegraded":       0,
	"LockgovLockAcquireFailuresHigh": model.Duration(10 * time.Minute),
	"LockgovLockWaitHigh":            model.Duration(10 * time.Minute),
	"LockgovPolicyViolations":        model.Duration(15 * time.Minute),
	"LockgovClockSkewDegraded":       model.Duration(5 * time.Minute),
	"LockgovClockSkewReject":         model.Duration(2 * time.Minute),
	"LockgovWorkerIDCollision":       model.Duration(time.Minute),
	"LockgovDeadlock":                model.Duration(2 * time.Minute),
	"LockgovLockOrderInversion":      model.Duration(15 * time.Minute),
	"LockgovWorkerLeaseLost":         model.Duration(time.Minute),
	"LockgovSnowflakeClockBackwards": 0,
	"LockgovSnowflakeLifetimeLow":    model.Duration(time.Hour),
	"LockgovIdempotencyStoreErrors":  model.Duration(5 * time.Minute),
	"LockgovQuotaDeductErrors":       model.Duration(5 * time.Minute),
	"LockgovAgentDown":               model.Duration(5 * time.Minute),
	"LockgovAgentScanFailing":        model.Duration(5 * time.Minute),
	"LockgovAgentScanIncomplete":     model.Duration(5 * time.Minute),
	"LockgovAgentStoreDown":          model.Duration(5 * time.Minute),
	"LockgovStoreEvictionEnabled":    model.Duration(15 * time.Minute),
	"LockgovStoreEvictingKeys":       0,
}

// Default returns the config the committed deploy/ files are generated
// from.
func Default() Config {
	skew := policy.Default().Skew
	return Config{
		Selectors: Selectors{AgentJob: "lockgov-agent"},
		Thresholds: Thresholds{
			AcquireFailureRatio:     0.05,
			AcquireWaitP99:          model.Duration(time.Second),
			SkewDegrade:             model.Duration(skew.Degrade),
			SkewReject:              model.Duration(skew.Reject),
			SnowflakeLifetimeLow:    model.Duration(365 * 24 * time.Hour),
			IdempotencyErrorRatio:   0.01,
			QuotaErrorRatio:         0.01,
			AgentScanMissing:        model.Duration(10 * time.Minute),
			RateWindow:              model.Duration(5 * time.Minute),
			PolicyViolationsPerHour: 0,
		},
		For:         maps.Clone(DefaultFor),
		RunbookBase: "https://github.com/lockgov/lockgov/blob/main/docs/runbooks/",
	}
}

// Validate returns one *policy.Error per problem (Field set, File and Line
// left for the parser to fill).
func (c Config) Validate() []*policy.Error {
	var errs []*policy.Error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &policy.Error{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	for field, re := range map[string]string{
		"selectors.job": c.Selectors.Job, "selectors.agent_job": c.Selectors.AgentJob,
		"selectors.cluster": c.Selectors.Cluster, "selectors.namespace": c.Selectors.Namespace,
	} {
		if _, err := regexp.Compile("^(?:" + re + ")$"); err != nil {
			bad(field, "not a regular expression: %v", err)
		}
	}
	if c.Selectors.AgentJob == "" {
		bad("selectors.agent_job", "must not be empty: LockgovAgentDown watches up{job=~agent_job}")
	}
	t := c.Thresholds
	for field, v := range map[string]float64{
		"thresholds.acquire_failure_ratio":   t.AcquireFailureRatio,
		"thresholds.idempotency_error_ratio": t.IdempotencyErrorRatio,
		"thresholds.quota_error_ratio":       t.QuotaErrorRatio,
	} {
		if !(v > 0 && v <= 1) {
			bad(field, "%v is not a ratio in (0, 1]", v)
		}
	}
	if !(t.PolicyViolationsPerHour >= 0) {
		bad("thresholds.policy_violations_per_hour", "%v is negative", t.PolicyViolationsPerHour)
	}
	for field, v := range map[string]model.Duration{
		"thresholds.acquire_wait_p99": t.AcquireWaitP99, "thresholds.skew_degrade": t.SkewDegrade,
		"thresholds.skew_reject": t.SkewReject, "thresholds.snowflake_lifetime_low": t.SnowflakeLifetimeLow,
		"thresholds.agent_scan_missing": t.AgentScanMissing, "thresholds.rate_window": t.RateWindow,
	} {
		if v <= 0 {
			bad(field, "must be positive")
		}
	}
	if t.SkewDegrade > 0 && t.SkewReject <= t.SkewDegrade {
		bad("thresholds.skew_reject", "%v must be above skew_degrade (%v)", t.SkewReject, t.SkewDegrade)
	}
	for _, name := range slices.Sorted(maps.Keys(c.For)) {
		if _, ok := DefaultFor[name]; !ok {
			bad("for."+name, "no such alert (known: %s)", strings.Join(slices.Sorted(maps.Keys(DefaultFor)), ", "))
		} else if c.For[name] < 0 {
			bad("for."+name, "must not be negative")
		}
	}
	for name := range DefaultFor {
		if _, ok := c.For[name]; !ok {
			bad("for."+name, "missing")
		}
	}
	slices.SortStableFunc(errs, func(a, b *policy.Error) int { return strings.Compare(a.Field, b.Field) })
	return errs
}

// Selector returns the PromQL label matchers of the services' series, with
// extra matchers appended: `job=~"payments",lock_pattern=~"$lock_pattern"`.
func (c Config) Selector(extra ...string) string { return c.matchers(c.Selectors.Job, extra) }

// AgentSelector is Selector for the agent's series.
func (c Config) AgentSelector(extra ...string) string {
	return c.matchers(c.Selectors.AgentJob, extra)
}

func (c Config) matchers(job string, extra []string) string {
	var ms []string
	for _, m := range [][2]string{{"job", job}, {"cluster", c.Selectors.Cluster}, {"namespace", c.Selectors.Namespace}} {
		if m[1] != "" {
			ms = append(ms, m[0]+`=~`+strconv.Quote(m[1]))
		}
	}
	return strings.Join(append(ms, extra...), ",")
}
