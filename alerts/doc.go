// Package alerts is lockgov's Prometheus alerting and recording rules as Go
// values, rendered to a rule file by YAML and written into a GitOps repo by
// `lockgov generate` (internal/generate). The selectors, thresholds and
// `for` durations come from the config block (internal/mixin), as in the
// monitoring-mixins.
//
//	b, err := alerts.YAML(mixin.Default())
//
// Every alert carries labels.severity (critical pages, warning opens a
// ticket: see the example Alertmanager routes, AlertmanagerExample), and
// annotations summary, description (naming the labels that locate the
// problem) and runbook_url, pointing at docs/runbooks/<AlertName>.md.
// The recording rules (AcquireP99 and the others) are the p99s and ratios
// the dashboards read.
//
// # Guarantees
//
// YAML is byte-identical for equal configs. The tests hold that every
// alert fires in one promtool unit test (testdata/lockgov.rules.test.yaml,
// beside the rendered rules) and stays silent in another, that promtool
// check rules accepts the file, that every metric an expression reads is a
// row of internal/telemetry's table, and that every runbook exists.
//
// # Failure modes
//
//   - The agent's per-instance metrics (lockgov_clock_skew_seconds{service,
//     instance}) carry an instance label of their own: scrape the agent with
//     honor_labels: true, or Prometheus renames it exported_instance and the
//     skew alerts name the agent instead of the skewed process.
//   - Findings are served by every agent (followers serve the leader's), so
//     the finding alerts take max, not sum, over agents. An agent that is
//     down leaves them silent: LockgovAgentDown and LockgovAgentScanFailing
//     are the alerts that say the others cannot be trusted.
//   - A detector that does not complete a scan (a slow store) keeps its
//     last findings, stale, in lockgov_findings, so the finding alerts
//     keep firing (their `for:` does not start over); LockgovAgentScanIncomplete
//     says when one has not completed for agent_scan_missing.
//   - LockgovAgentDown is absent(up == 1) over the agent job: it fires only
//     when no agent of the selector is up, and names no instance.
//   - The store-error alerts compare rates: with no traffic at all they stay
//     silent, whatever the store's state.
package alerts
