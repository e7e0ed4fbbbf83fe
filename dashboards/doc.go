// Package dashboards is lockgov's Grafana dashboards as Go code, built with
// github.com/grafana/grafana-foundation-sdk/go (no JSON written by hand):
// Locks overview, Lock pattern (a lock_pattern variable), IDs, Agent and
// fleet, Tokens and quota. `lockgov generate` (internal/generate) writes
// them into a GitOps repo, plain or as GrafanaDashboard manifests.
//
//	ds, err := dashboards.All(mixin.Default())
//	for _, d := range ds {
//		b, _ := dashboards.JSON(d.Dashboard) // d.File: lockgov-ids.json, ...
//	}
//
// # Guarantees
//
// Every dashboard has a Prometheus data source variable ("datasource") that
// every panel and target uses; the selectors and thresholds come from the
// config block (internal/mixin), the same as the alert rules', and the
// alert thresholds are drawn on the panels they belong to (the 100/500 ms
// skew tiers on "Clock skew per instance"). UIDs are constants, panel ids
// run from 1 in layout order, refIds from A per panel, so regenerating
// gives byte-identical JSON and a GitOps diff shows only real changes. The
// tests hold that the JSON parses back into the SDK's dashboard type, that
// panel ids are unique, that every target has a refId, an expr and the
// data source variable, and that every metric an expr reads is in
// internal/telemetry's table or is a recording rule of package alerts.
//
// # Failure modes
//
//   - Latency panels read the recording rules of package alerts: without
//     those rules loaded in Prometheus they are empty (the all-pattern p99
//     with exemplars reads the raw histogram and still works).
//   - Exemplars need Prometheus's exemplar storage
//     (--enable-feature=exemplar-storage) and OpenMetrics scraping.
//   - Agent panels read the agent's series with the agent selector; scrape
//     the agent with honor_labels: true or "Clock skew per instance" names
//     the agent's instance, not the skewed process (see package alerts).
package dashboards
