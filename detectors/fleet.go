package detectors

import (
	"context"
	"time"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/lockvalue"
)

// beat is a heartbeat and the store it was read from.
type beat struct {
	store Store
	hb    *fleet.Heartbeat
}

// readBeats reads the heartbeats of every store, in store then instance
// order. A store that cannot be read fails the whole read: a partial fleet
// view would make live holders look dead.
func readBeats(ctx context.Context, stores []Store) ([]beat, error) {
	var out []beat
	for _, s := range stores {
		hbs, err := s.Heartbeats(ctx)
		if err != nil {
			return nil, err
		}
		for _, hb := range hbs {
			out = append(out, beat{s, hb})
		}
	}
	return out, nil
}

// identities of a process: host+pid, and instance+pid. A lock value and a
// heartbeat written by one process share at least one (the lock value's
// instance defaults to the host name, the heartbeat's to host name plus
// pid, and both carry host and pid).
type ident struct {
	byInstance bool
	name       string
	pid        int
}

func hostPID(host string, pid int) ident {
	if host == "" || pid == 0 {
		return ident{}
	}
	return ident{name: host, pid: pid}
}

func instPID(inst string, pid int) ident {
	if inst == "" {
		return ident{}
	}
	return ident{byInstance: true, name: inst, pid: pid}
}

// liveSet indexes the live heartbeats by identity.
type liveSet struct {
	ids        map[ident]*fleet.Heartbeat
	byInstance map[string]*fleet.Heartbeat
}

func newLiveSet(beats []beat) liveSet {
	l := liveSet{ids: map[ident]*fleet.Heartbeat{}, byInstance: map[string]*fleet.Heartbeat{}}
	for _, b := range beats {
		for _, id := range [2]ident{hostPID(b.hb.Host, b.hb.PID), instPID(b.hb.Instance, b.hb.PID)} {
			if id != (ident{}) {
				l.ids[id] = b.hb
			}
		}
		l.byInstance[b.hb.Instance] = b.hb
	}
	return l
}

// holderIDs are the identities of a lock's holder (zero when unknown).
func holderIDs(h *lockvalue.Holder) [2]ident {
	return [2]ident{hostPID(h.Host, h.PID), instPID(h.Instance, h.PID)}
}

// live returns the heartbeat of h's process, if it publishes one. A value
// without a pid matches a heartbeat by instance alone.
func (l liveSet) live(h *lockvalue.Holder) *fleet.Heartbeat {
	for _, id := range holderIDs(h) {
		if id == (ident{}) {
			continue
		}
		if hb := l.ids[id]; hb != nil {
			return hb
		}
	}
	if h.PID == 0 && h.Instance != "" {
		return l.byInstance[h.Instance]
	}
	return nil
}

// seenSet remembers the identities of processes whose heartbeats were
// seen, with when, for retention; it is bounded by the fleet seen within
// that time, not by the number of locks.
type seenSet struct {
	at        map[ident]time.Time
	retention time.Duration
}

func (s *seenSet) record(beats []beat, now time.Time) {
	if s.at == nil {
		s.at = map[ident]time.Time{}
	}
	for _, b := range beats {
		for _, id := range [2]ident{hostPID(b.hb.Host, b.hb.PID), instPID(b.hb.Instance, b.hb.PID)} {
			if id != (ident{}) {
				s.at[id] = now
			}
		}
	}
	for id, t := range s.at {
		if now.Sub(t) > s.retention {
			delete(s.at, id)
		}
	}
}

// gone reports whether h's process published heartbeats earlier (within
// the retention) and publishes none now.
func (s *seenSet) gone(h *lockvalue.Holder, live liveSet) bool {
	return !h.Foreign && live.live(h) == nil && s.seen(h)
}

// seen reports whether h's process was seen publishing heartbeats.
func (s *seenSet) seen(h *lockvalue.Holder) bool {
	for _, id := range holderIDs(h) {
		if id == (ident{}) {
			continue
		}
		if _, ok := s.at[id]; ok {
			return true
		}
	}
	return false
}
