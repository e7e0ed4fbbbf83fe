// Package telemetry is the one home of lockgov's metric names: the table
// (Table) of every lockgov_* metric with its type, help, labels and buckets,
// and the helpers every component uses to turn a table row into a
// collector, register it on a caller's registry (sharing a collector that an
// earlier component registered), observe with a trace_id exemplar, and cache
// the labelled children of a hot path.
//
// The README's metric table, the dashboards, the alert rules and tests all
// read Table, so a metric renamed here is renamed everywhere, and a test
// fails where a name is used that the table does not have.
//
// It is internal: users see metric names (README, generated dashboards),
// not this package. Library code never registers on the global registry:
// every helper takes the caller's prometheus.Registerer, and a nil one keeps
// the collectors unexported.
//
// # Failure modes
//
// Register returns an error when another collector with the same name but a
// different type, help or label set is already registered on the registry
// (for example a second lockgov version in one binary): callers surface it
// as a configuration error instead of exporting wrong numbers.
package telemetry
