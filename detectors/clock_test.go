package detectors_test

import (
	"strings"
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
	t.Parallel()
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

// A publisher that cannot measure its clock keeps its last sample, which
// its beats go on carrying: an offset measured more than three intervals
// before the beat says nothing of the clock now. It is not ranked (the
// tier the process applies still is), and the finding says how old it is.
func TestClock_AnOffsetMeasuredLongBeforeTheBeatIsNotRanked(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := newRedis(t)
	for _, b := range []struct {
		inst string
		age  time.Duration
		tier string
	}{{"fresh", 0, "ok"}, {"stale", 10 * fleet.DefaultPeriod, "ok"}, {"stale-says", 10 * fleet.DefaultPeriod, "reject"}} {
		hb := otherBeat(b.inst, 1)
		hb.Tier = b.tier
		hb.Clock = &fleet.ClockSample{Offset: 700 * time.Millisecond, RTT: time.Millisecond,
			MeasuredAt: hb.SentAt.Add(-b.age), Source: fleet.ClockSourceStore}
		putBeat(t, ctx, c, hb)
	}
	d, err := detectors.NewClock(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]detectors.Finding{}
	for _, f := range detect(t, ctx, d) {
		got[f.Holder.Instance] = f
	}
	if len(got) != 2 || got["fresh"].Kind != detectors.KindSkewReject || got["stale-says"].Kind != detectors.KindSkewReject {
		t.Fatalf("findings for %v, want skew_reject for fresh (its offset) and stale-says (its own tier)", got)
	}
	if detail := got["stale-says"].Detail; !strings.Contains(detail, "50s before its beat and not since") {
		t.Errorf("the stale offset's finding does not say how old it is: %s", detail)
	}
}
