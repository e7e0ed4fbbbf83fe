package mixin

import (
	"slices"
	"testing"
)

func noRecording(string) ([]string, bool) { return nil, false }

// TestUnknownLabels_NamesALabelNoSeriesOfTheExpressionHas: the checks the
// dashboards and rules tests build on find a misspelt or renamed label in
// a matcher and in a grouping clause, and pass the table's own labels,
// the scrape's and a histogram's le.
func TestUnknownLabels_NamesALabelNoSeriesOfTheExpressionHas(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum by (lock_pattern, result) (rate(lockgov_lock_acquire_total{lock_pattern=~"x"}[5m]))`, nil},
		{`histogram_quantile(0.99, sum by (job, le) (rate(lockgov_agent_scan_duration_seconds_bucket{job=~"a"}[5m])))`, nil},
		{`absent(up{job=~"lockgov-agent"} == 1)`, nil},
		{`sum by (pattern) (rate(lockgov_lock_acquire_total[5m]))`, []string{"pattern"}},
		{`sum(rate(lockgov_lock_acquire_total{outcome="error"}[5m]))`, []string{`outcome="error"`}},
		{`max by (kind) (lockgov_findings{severty="critical"})`, []string{`severty="critical"`}},
		{`max by (le) (lockgov_lock_held)`, []string{"le"}},
		{`max by (instance, service) (lockgov_clock_skew_seconds)`, nil},
		{`sum by (store) (lockgov_quota_deduct_total)`, []string{"store"}},
		{`max(lockgov_findings{kind="holder_gone"})`, []string{`kind="holder_gone"`}},
		{`max(lockgov_findings{kind=~"workerid_.*"})`, nil},
		{`max(lockgov_findings{kind=~"worker_.*"})`, []string{`kind=~"worker_.*"`}},
		{`sum(rate(lockgov_lock_acquire_total{result=~"error|not_acquired"}[5m]))`, nil},
		{`sum(rate(lockgov_lock_acquire_total{result=~"error|timeout"}[5m]))`, []string{`result=~"error|timeout"`}},
		{`sum(rate(lockgov_lock_acquire_total{lock_pattern=~"$lock_pattern"}[5m]))`, nil},
	} {
		if got := UnknownLabels(tc.expr, noRecording); !slices.Equal(got, tc.want) {
			t.Errorf("UnknownLabels(%s) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// TestResultLabels_AreTheByLabels: a legend or an annotation can name only
// what the result keeps.
func TestResultLabels_AreTheByLabels(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum by (lock_pattern, result) (rate(lockgov_lock_acquire_total[5m]))`, []string{"lock_pattern", "result"}},
		{`histogram_quantile(0.99, sum by (job, le) (rate(lockgov_agent_scan_duration_seconds_bucket[5m])))`, []string{"job"}},
		{`sum(rate(lockgov_lock_acquire_total[5m]))`, nil},
		{`lockgov_agent_store_up == 0`, []string{"store", "job", "instance", "cluster", "namespace"}},
	} {
		if got := ResultLabels(tc.expr, noRecording); !slices.Equal(got, tc.want) {
			t.Errorf("ResultLabels(%s) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
