package agent

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument/fleet"
)

// clocks measures the clock offset of processes whose heartbeats live on
// etcd, which exposes no clock for them to measure their own (fleet's
// TierReport describes the method): for each beat the agent's watch
// delivers, SentAt minus the agent's wall clock on arrival is the process's
// offset minus the delivery delay, so the largest such difference over
// recent beats is the best estimate. The leader writes the estimates back
// as tier reports, which the library reads and applies as its own offset.
// The agent's own clock is taken as the reference (its host is expected to
// run NTP).
type clocks struct {
	mu   sync.Mutex
	best map[clockKey]clockSample
}

type clockKey struct {
	store    *store
	instance string
}

type clockSample struct {
	offset time.Duration
	at     time.Time // when the best sample arrived
}

// watchClocks follows the heartbeats on one etcd store until ctx ends,
// re-watching after an error.
func (a *Agent) watchClocks(ctx context.Context, s *store) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range s.etcd.Watch(wctx, fleet.EtcdPrefix, clientv3.WithPrefix(), clientv3.WithFilterDelete()) {
			now := time.Now()
			for _, ev := range wr.Events {
				hb, err := fleet.Decode(ev.Kv.Value)
				if err != nil || hb.SentAt.IsZero() {
					continue
				}
				a.clocks.observe(clockKey{s, hb.Instance}, hb.SentAt.Sub(now), now, 3*max(hb.Interval, a.cfg.Interval))
			}
		}
		cancel()
		pause(ctx, a.cfg.Interval)
	}
}

// observe keeps the largest difference seen within window.
func (c *clocks) observe(k clockKey, d time.Duration, now time.Time, window time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.best == nil {
		c.best = map[clockKey]clockSample{}
	}
	if cur, ok := c.best[k]; !ok || d > cur.offset || now.Sub(cur.at) > window {
		c.best[k] = clockSample{offset: d, at: now}
	}
}

// current returns the estimates of s newer than maxAge, and forgets older ones.
func (c *clocks) current(s *store, maxAge time.Duration, now time.Time) map[string]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]time.Duration{}
	for k, v := range c.best {
		switch {
		case now.Sub(v.at) > maxAge:
			delete(c.best, k)
		case k.store == s:
			out[k.instance] = v.offset
		}
	}
	return out
}

// writeTiers writes the leader's tier reports for the instances on etcd
// stores, under one lease of three intervals per store and scan: a report
// from an agent that stopped disappears.
func (a *Agent) writeTiers(ctx context.Context) []string {
	var errs []string
	for _, s := range a.stores {
		if s.etcd == nil {
			continue
		}
		now := time.Now()
		est := a.clocks.current(s, 3*a.cfg.Interval, now)
		if len(est) == 0 {
			continue
		}
		lease, err := s.etcd.Grant(ctx, max(int64(3*a.cfg.Interval/time.Second), 1))
		if err != nil {
			errs = append(errs, "tier reports on "+s.name+": "+err.Error())
			continue
		}
		for inst, off := range est {
			data, err := fleet.EncodeTierReport(&fleet.TierReport{Instance: inst, Offset: off,
				Tier: a.pol.Skew.Tier(off).String(), MeasuredAt: now, By: a.cfg.ID})
			if err == nil {
				_, err = s.etcd.Put(ctx, fleet.TierEtcdKey(inst), string(data), clientv3.WithLease(lease.ID))
			}
			if err != nil {
				errs = append(errs, "tier report of "+inst+" on "+s.name+": "+err.Error())
				break
			}
		}
	}
	return errs
}
