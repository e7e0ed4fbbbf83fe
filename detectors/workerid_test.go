package detectors_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// TestWorkerIDs_EveryKind claims a real WorkerID on Redis and etcd and
// publishes heartbeats around it: the holder alone is healthy; a second
// instance reporting the same id is workerid_duplicate; an instance
// reporting an id whose slot is gone is workerid_lease_gone from its second
// beat on; an id outside the service's range is workerid_out_of_range;
// overlapping ranges are workerid_range_overlap.
func TestWorkerIDs_EveryKind(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"redis", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			ctx := timeout(t, time.Minute)
			// The test writes the instances' heartbeats itself; the registry's
			// own heartbeat would add this test process as one more holder.
			opts := []workerid.Option{workerid.WithTTL(time.Second), workerid.WithServiceRange("auth", 0, 9), workerid.WithoutHeartbeat()}
			s, client, reg := registryOn(t, backend, opts...)
			lease, err := reg.Claim(ctx, "auth")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lease.Release(context.Background()) })
			id := lease.WorkerID()
			slot := workerid.SlotKey(workerid.DefaultKeyPrefix, id)
			self := selfBeat("self")
			self.WorkerIDs = []fleet.WorkerID{{Service: "auth", ID: id, Key: slot}}
			putBeat(t, ctx, client, self)

			d, err := detectors.NewWorkerIDs(s, detectors.WithServiceRange("auth", 0, 9))
			if err != nil {
				t.Fatal(err)
			}
			if fs := detect(t, ctx, d); len(fs) != 0 {
				t.Fatalf("the holder alone:%s", describe(fs))
			}

			twin := otherBeat("twin", 2)
			twin.WorkerIDs = []fleet.WorkerID{{Service: "auth", ID: id, Key: slot}}
			lost := otherBeat("lost", 3)
			lost.WorkerIDs = []fleet.WorkerID{{Service: "auth", ID: 5}}
			wild := otherBeat("wild", 4)
			wild.WorkerIDs = []fleet.WorkerID{{Service: "auth", ID: 42}}
			for _, hb := range []*fleet.Heartbeat{twin, lost, wild} {
				putBeat(t, ctx, client, hb)
			}
			d2, err := detectors.NewWorkerIDs(s, detectors.WithServiceRange("auth", 0, 9), detectors.WithServiceRange("billing", 5, 15))
			if err != nil {
				t.Fatal(err)
			}
			kinds := func(fs []detectors.Finding) string {
				m := map[string][]string{}
				for _, f := range fs {
					who := ""
					if f.Holder != nil {
						who = f.Holder.Instance
					}
					m[f.Kind] = append(m[f.Kind], who)
				}
				return fmt.Sprint(m)
			}
			// twin's slot is held by self (someone else), lost's slot is gone,
			// wild's slot is gone too: pending until their next beat.
			first := detect(t, ctx, d2)
			if got, want := kinds(first), "map[workerid_duplicate:[self] workerid_out_of_range:[wild] workerid_range_overlap:[]]"; got != want {
				t.Fatalf("first call:\n got %s\nwant %s%s", got, want, describe(first))
			}
			for _, hb := range []*fleet.Heartbeat{twin, lost, wild} {
				hb.SentAt = hb.SentAt.Add(fleet.DefaultPeriod)
				putBeat(t, ctx, client, hb)
			}
			fs := detect(t, ctx, d2)
			if got, want := kinds(fs), "map[workerid_duplicate:[self] workerid_lease_gone:[twin wild lost] workerid_out_of_range:[wild] workerid_range_overlap:[]]"; got != want {
				t.Fatalf("second call:\n got %s\nwant %s (lease_gone in key order: {0} {42} {5})%s", got, want, describe(fs))
			}
		})
	}
}

// TestWorkerIDs_AHandoverIsNoDuplicateButTwoLiveClaimantsAre: process old
// released WorkerID 3 and process new claimed it; old's last beat, sent
// before new's claim, still lists 3. That is a handover, not a duplicate
// (only new can issue IDs under 3). Once old sends a beat after the claim
// still listing 3, two live instances claim it: workerid_duplicate.
func TestWorkerIDs_AHandoverIsNoDuplicateButTwoLiveClaimantsAre(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"redis", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			ctx := timeout(t, time.Minute)
			opts := []workerid.Option{workerid.WithTTL(time.Second), workerid.WithServiceRange("auth", 3, 3), workerid.WithoutHeartbeat()}
			s, client, reg := registryOn(t, backend, opts...)
			// new (this process) holds the slot; old's last beat predates
			// new's claim.
			lease, err := reg.Claim(ctx, "auth")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lease.Release(context.Background()) })
			claimed := lease.Claim().ClaimedAt
			slot := workerid.SlotKey(workerid.DefaultKeyPrefix, 3)
			wids := []fleet.WorkerID{{Service: "auth", ID: 3, Key: slot}}
			newer := selfBeat("new")
			newer.WorkerIDs = wids
			old := otherBeat("old", 2)
			old.WorkerIDs = wids
			old.SentAt = claimed.Add(-time.Second)
			putBeat(t, ctx, client, newer)
			putBeat(t, ctx, client, old)
			d, err := detectors.NewWorkerIDs(s, detectors.WithServiceRange("auth", 3, 3))
			if err != nil {
				t.Fatal(err)
			}
			if fs := detect(t, ctx, d); len(fs) != 0 {
				t.Fatalf("a handover, old's last beat sent before new's claim:%s", describe(fs))
			}

			// old beats again, after the claim, and still lists 3.
			old.SentAt = claimed.Add(time.Second)
			putBeat(t, ctx, client, old)
			fs := detect(t, ctx, d)
			dup := byKey(fs, detectors.KindWorkerIDDuplicate)[slot]
			if dup.Kind == "" || !strings.Contains(dup.Detail, "instance new") || !strings.Contains(dup.Detail, "instance old") {
				t.Fatalf("two live instances beating after the claim: want workerid_duplicate naming both:%s", describe(fs))
			}
			if _, ok := byKey(fs, detectors.KindWorkerIDLeaseGone)[slot]; !ok {
				t.Errorf("old's second beat listing a slot new holds: want workerid_lease_gone:%s", describe(fs))
			}
		})
	}
}

// registryOn starts a store of backend ("redis" or "etcd") and returns the
// detectors' view of it, the client heartbeats are written with, and a
// WorkerID registry on it.
func registryOn(t *testing.T, backend string, opts ...workerid.Option) (detectors.Store, any, *workerid.Registry) {
	t.Helper()
	var s detectors.Store
	var client any
	var reg *workerid.Registry
	var err error
	if backend == "redis" {
		c := newRedis(t)
		s, client = redisStore(t, c), c
		reg, err = workerid.NewRedis(c, opts...)
	} else {
		c := newEtcd(t)
		s, client = etcdStore(t, c), c
		reg, err = workerid.NewEtcd(c, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s, client, reg
}
