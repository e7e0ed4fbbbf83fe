package mixin

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

func TestParse_OverridesDefaultsAndKeepsTheRest(t *testing.T) {
	cfg, err := Parse("mixin.yaml", []byte("selectors:\n  job: payments-.*\nthresholds:\n  skew_reject: 1s\nfor:\n  LockgovLockImmortal: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Selectors.Job = "payments-.*"
	want.Thresholds.SkewReject = model.Duration(time.Second)
	want.For["LockgovLockImmortal"] = model.Duration(30 * time.Second)
	if cfg.Selectors != want.Selectors || cfg.Thresholds != want.Thresholds || cfg.For["LockgovLockImmortal"] != want.For["LockgovLockImmortal"] {
		t.Fatalf("got %+v\nwant %+v", cfg, want)
	}
	if got := cfg.Selector(`lock_pattern="x"`); got != `job=~"payments-.*",lock_pattern="x"` {
		t.Fatalf("Selector = %s", got)
	}
	if empty, err := Parse("empty.yaml", nil); err != nil || empty.Thresholds != Default().Thresholds {
		t.Fatalf("an empty file is not the default: %v", err)
	}
}

// TestParse_ErrorsNameFileLineAndField holds the policy's error contract
// for the config block: every problem, each as FILE:LINE: FIELD: problem.
func TestParse_ErrorsNameFileLineAndField(t *testing.T) {
	const doc = `selectors:
  job: "payments-("
thresholds:
  acquire_failure_ratio: 2
  skew_reject: 50ms
  wat: 1
for:
  LockgovNope: 1m
  LockgovDeadlock: soon
  LockgovDeadlock: 1m
`
	_, err := Parse("bad.yaml", []byte(doc))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"bad.yaml:2: selectors.job: not a regular expression",
		"bad.yaml:4: thresholds.acquire_failure_ratio: 2 is not a ratio",
		"bad.yaml:5: thresholds.skew_reject: 50ms must be above skew_degrade (100ms)",
		"bad.yaml:6: thresholds.wat: unknown field",
		"bad.yaml:8: for.LockgovNope: no such alert",
		`bad.yaml:9: for.LockgovDeadlock: "soon" is not a duration`,
		"bad.yaml:10: for.LockgovDeadlock: duplicate field (first at line 9)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := Parse("x.yaml", []byte("selectors: [")); err == nil || !strings.HasPrefix(err.Error(), "x.yaml:1: yaml:") {
		t.Errorf("syntax error: %v", err)
	}
}
