package fleet_test

import (
	"bytes"
	"testing"

	"github.com/lockgov/lockgov/instrument/fleet"
)

// TestHeartbeat_FallbackMarkerIsAnAdditionThatOldBeatsReadAsStoreLocks: a
// beat written before the field existed decodes with every entry a store
// lock (Fallback false), a beat without fallback entries encodes as it did
// (no "fallback" member), and a marked entry survives the round trip.
func TestHeartbeat_FallbackMarkerIsAnAdditionThatOldBeatsReadAsStoreLocks(t *testing.T) {
	old := []byte(`{"instance":"pod-a","service":"svc","version":"v0","host":"h","pid":1,` +
		`"started_at":"2026-01-01T00:00:00Z","sent_at":"2026-01-01T00:00:01Z","interval_ns":5000000000,` +
		`"held":[{"key":"lock:x","pattern":"lock:x","backend":"redis","fence":7,"since":"2026-01-01T00:00:00Z"}],` +
		`"waiting":[{"key":"lock:y","pattern":"lock:y","backend":"redis","since":"2026-01-01T00:00:00Z","holds_while_waiting":["lock:x"]}]}`)
	hb, err := fleet.Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Held[0].Fallback || hb.Waiting[0].Fallback {
		t.Fatalf("an old beat read as fallback: %+v %+v", hb.Held[0], hb.Waiting[0])
	}
	again, err := fleet.Encode(hb)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(again, []byte("fallback")) {
		t.Fatalf("a beat without fallback entries names the field: %s", again)
	}
	hb.Held[0].Fallback, hb.Waiting[0].Fallback = true, true
	marked, err := fleet.Encode(hb)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(marked, []byte(`"fallback":true`)); n != 2 {
		t.Fatalf(`%d "fallback":true members, want 2: %s`, n, marked)
	}
	back, err := fleet.Decode(marked)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Held[0].Fallback || !back.Waiting[0].Fallback {
		t.Fatalf("the marker did not survive the round trip: %+v %+v", back.Held[0], back.Waiting[0])
	}
}
