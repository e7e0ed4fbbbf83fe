package main

import (
	"strings"
	"testing"
)

// TestTargets_SnowflakeParallelAtTheLimitIsEqual: when both generators run at a layout's
// limit (a hard cap), a ratio a hair under 1 is noise and the target passes, saying why;
// a generator below the limit is judged by its ratio.
func TestTargets_SnowflakeParallelAtTheLimitIsEqual(t *testing.T) {
	const limit = 4096000
	for _, tc := range []struct {
		name             string
		lockgov, bw, got float64
		pass             bool
	}{
		{"both at the limit, ratio 0.999", 0.999 * limit, limit, 0.999, true},
		{"lockgov below the limit", 0.97 * limit, limit, 0.97, false},
		{"both below the limit", 0.5 * limit, 0.6 * limit, 0.83, false},
	} {
		r := &results{ids: []idRow{
			{name: idLockgov, layout: "41x10x12", goroutines: 2, idsPerSec: tc.lockgov, limit: limit, ratioBw: tc.got},
			{name: idBwmarrin, layout: "41x10x12", goroutines: 2, idsPerSec: tc.bw, limit: limit, ratioBw: 1},
		}}
		var found bool
		for _, tg := range r.targets() {
			if !strings.HasPrefix(tg.what, "snowflake 41/10/12 parallel (2 goroutines)") {
				continue
			}
			found = true
			if tg.pass() != tc.pass {
				t.Errorf("%s: pass %v, want %v (%s)", tc.name, tg.pass(), tc.pass, tg.context)
			}
			if tc.pass && !strings.Contains(tg.context, "both at the layout's limit") {
				t.Errorf("%s: the context does not say why: %q", tc.name, tg.context)
			}
		}
		if !found {
			t.Fatalf("%s: no 41/10/12 parallel target", tc.name)
		}
	}
}
