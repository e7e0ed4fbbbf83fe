package mixin

import (
	"regexp"
	"strings"

	"github.com/lockgov/lockgov/internal/telemetry"
)

// metricName matches a lockgov metric or a recording rule made from one
// (level:lockgov_metric:operation) in a PromQL expression.
var metricName = regexp.MustCompile(`(?:[a-z_]+:)?lockgov_[a-z0-9_]+(?::[a-z0-9_]+)?`)

// UnknownMetrics returns the names in the PromQL expression expr that are
// neither a row of telemetry.Table (a histogram's _bucket, _count and _sum
// series count as its row) nor, for names with a colon, a recording rule
// recorded reports. A renamed metric cannot leave a dead panel or a silent
// alert behind: the tests of the rules and dashboards fail on it.
func UnknownMetrics(expr string, recorded func(string) bool) []string {
	var unknown []string
	for _, name := range metricName.FindAllString(expr, -1) {
		if strings.Contains(name, ":") {
			if !recorded(name) {
				unknown = append(unknown, name)
			}
			continue
		}
		if _, ok := telemetry.Lookup(name); ok {
			continue
		}
		base := name
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if m, ok := telemetry.Lookup(base); ok && m.Kind == telemetry.Histogram && base != name {
			continue
		}
		unknown = append(unknown, name)
	}
	return unknown
}
