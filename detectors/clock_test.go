package detectors_test

import (
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/fleet"
)

// TestClock_SkewTiersFromHeartbeats: instances reporting 50ms, 300ms,
// -700ms offsets and one that reports tier reject without an offset, on a
// real Redis Cluster and a real etcd: degrade for 300ms, reject for 700ms
// and for the self-reported reject, nothing for 50ms.
func TestClock_SkewTiersFromHeartbeats(t *testing.T) {
	ctx := timeout(t, time.Minute)
	cc, ec := newCluster(t), newEtcd(t)
	for _, tc := range []struct {
		store  detectors.Store
		client any
	}{{redisStore(t, cc), cc}, {etcdStore(t, ec), ec}} {
		for _, b := range []struct {
			inst   string
			offset time.Duration
			tier   string
		}{{"ok", 50 * time.Millisecond, "ok"}, {"slow", 300 * time.Millisecond, "degrade"}, {"fast", -700 * time.Millisecond, "reject"}, {"says", 0, "reject"}} {
			hb := otherBeat(b.inst, 1)
			hb.Tier = b.tier
			if b.offset != 0 {
				hb.Clock = &fleet.ClockSample{Offset: b.offset, RTT: time.Millisecond, MeasuredAt: time.Now()}
			}
			putBeat(t, ctx, tc.client, hb)
		}
		d, err := detectors.NewClock(tc.store)
		if err != nil {
			t.Fatal(err)
		}
		fs := detect(t, ctx, d)
		got := map[string]string{}
		for _, f := range fs {
			got[f.Holder.Instance] = f.Kind + "/" + f.Severity
		}
		want := map[string]string{"slow": "skew_degrade/warning", "fast": "skew_reject/critical", "says": "skew_reject/critical"}
		if len(got) != len(want) || len(fs) != len(want) {
			t.Fatalf("%s: got %v, want %v", tc.store.Addr(), got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: got %v, want %v", tc.store.Addr(), got, want)
			}
		}
	}
}
