package workerid

import (
	"fmt"
	"time"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/fleet/etcdstore"
	"github.com/lockgov/lockgov/instrument/fleet/redisstore"
	"github.com/lockgov/lockgov/policy"
)

// WithoutHeartbeat publishes no heartbeat for this registry's leases: the agent then cannot
// see their WorkerIDs, and generators bound to them apply no skew tier.
func WithoutHeartbeat() Option { return optionFunc(func(c *config) { c.noBeat = true }) }

// WithHeartbeat configures the process's heartbeat on the registry's store (instance,
// service, interval, an injected clock, skew tiers; see package fleet). The heartbeat is
// shared by every WorkerID lease and governed Locker of the process on one store; the
// options of the one that starts it apply.
func WithHeartbeat(opts ...fleet.Option) Option {
	return optionFunc(func(c *config) { c.beatOpts = append(c.beatOpts, opts...) })
}

// fleetStore is the store the registry's leases publish their WorkerIDs into.
func (r *Registry) fleetStore() fleet.Store {
	switch b := r.b.(type) {
	case *redisBackend:
		return redisstore.New(b.c)
	case *etcdBackend:
		return etcdstore.New(b.c)
	}
	return nil
}

// attachFleet lists the lease's WorkerID in the process's heartbeat on the registry's store
// (started by the first lease or Locker there). A heartbeat that cannot start costs the
// lease nothing but visibility: it is logged, not returned.
func (s *leaseState) attachFleet() {
	cfg := s.reg.cfg
	if cfg.noBeat {
		return
	}
	store := s.reg.fleetStore()
	if store == nil {
		return
	}
	opts := append([]fleet.Option{fleet.WithService(s.claim.Service), fleet.WithLogger(cfg.logger)}, cfg.beatOpts...)
	a, err := fleet.Attach(store, opts...)
	if err != nil {
		cfg.logger.Warn("workerid: heartbeat not started", "worker_id", s.claim.WorkerID, "error", err)
		return
	}
	a.TrackWorkerID(s, fleet.WorkerID{Service: s.claim.Service, ID: s.claim.WorkerID, Key: s.key})
	s.beat.Store(a)
}

// detachFleet removes the lease's WorkerID from the heartbeat; the last share deletes it.
func (s *leaseState) detachFleet() {
	if a := s.beat.Swap(nil); a != nil {
		a.UntrackWorkerID(s)
		_ = a.Close()
	}
}

// ClockSkew reports the process's clock offset to the registry's store, from its heartbeat,
// and whether the skew tiers reject new IDs at that offset. A snowflake.Generator bound to
// the lease with snowflake.WithLease honours it. Without a heartbeat, or before the first
// measurement, it never rejects.
func (l *Lease) ClockSkew() (offset time.Duration, reject bool) {
	a := l.s.beat.Load()
	if a == nil {
		return 0, false
	}
	off, ok := a.Skew()
	return off, ok && a.Tier() == policy.TierReject
}

func checkBeatOptions(c *config) error {
	if err := fleet.CheckOptions(c.beatOpts...); err != nil {
		return fmt.Errorf("%w: heartbeat: %w", ErrInvalid, err)
	}
	return nil
}
