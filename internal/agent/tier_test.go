package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestTierReports_AnEtcdOnlyProcessWithASkewedClockRejectsNewLocks holds
// the etcd half of the skew tiers end to end: etcd has no clock, so a
// governed process on etcd cannot measure its own offset; the agent
// measures it from the heartbeats it receives and writes a tier report,
// which the process reads back and applies — a clock 700 ms ahead ends in
// ErrClockSkew from Acquire.
func TestTierReports_AnEtcdOnlyProcessWithASkewedClockRejectsNewLocks(t *testing.T) {
	e := testenv.NewEtcd(t)
	c := e.Client(t)
	raw, err := etcdlock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := instrument.NewGoverned(raw, instrument.WithHeartbeat(fleet.WithInstance("skewed"), fleet.WithService("billing"),
		fleet.WithInterval(200*time.Millisecond), fleet.WithClock(func() time.Time { return time.Now().Add(700 * time.Millisecond) })))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if l, err := g.Acquire(ctx, "lock:bill:1", instrument.FailFast()); err != nil {
		t.Fatalf("before any report: %v, want the lock (no measurement, no tier)", err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig("agent")
	cfg.Etcd = []string{e.Endpoint()}
	start(t, cfg)
	waitFor(t, "ErrClockSkew from the skewed process", func() bool {
		l, err := g.Acquire(ctx, "lock:bill:1", instrument.FailFast())
		if err == nil {
			_ = l.Release(ctx)
		}
		return errors.Is(err, instrument.ErrClockSkew)
	})
}
