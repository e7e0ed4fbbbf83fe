// Package generate writes lockgov's observability as code into a
// directory for a GitOps repo (`lockgov generate`): the dashboards of
// package dashboards, the rules of package alerts and the example
// Alertmanager routes, from one config block (internal/mixin).
//
//	dashboards/<uid>.json | .yaml    Grafana JSON, or GrafanaDashboard manifests (operator)
//	rules/lockgov.rules.yaml         a Prometheus rule file, or a PrometheusRule manifest (operator)
//	alertmanager/routes.example.yaml an Alertmanager config to copy routes and inhibitions from
//
// Check compares a directory with what Generate would write and lists
// stale, missing and extra files, for the GitOps repo's own CI.
//
// # Guarantees
//
// Output is byte-identical across runs for equal format and config: no
// timestamps, no versions, sorted keys. Every YAML file opens with a
// header saying it is generated and how to regenerate it (JSON has no
// comments: the dashboards' JSON carries none). A copy generated from
// mixin.Default() is committed in deploy/plain and deploy/operator; a test
// keeps it current.
//
// # Failure modes
//
//   - --out naming an existing file is an error; a missing directory is
//     created.
//   - Generate overwrites the files it owns and leaves other files alone:
//     after a dashboard is removed or renamed, its old file stays until
//     removed by hand, and Check lists it as extra.
//   - Check treats every file under the directory, except names starting
//     with a dot (.git, .github), as generated: point it at a directory that
//     holds only generated output.
package generate
