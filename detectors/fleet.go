package detectors

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"time"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/lockvalue"
)

// beat is a heartbeat and the store it was read from.
type beat struct {
	store Store
	hb    *fleet.Heartbeat
}

// recheckFleet adds to r the heartbeats, read key by key
// (RedisStore.lookupBeats, on a Cluster), of the instances seen earlier
// that the scans did not return: a heartbeat moved by a resharding while
// the primaries were scanned one by one is missed by the scan, and its
// process's locks would be reported holder_dead. A lookup that fails
// moves its store to r.failed, as a scan that fails does; on the first
// store, when own, it is the error.
func recheckFleet(ctx context.Context, stores []Store, seen *seenSet, r *fleetRead, own bool) error {
	missing := seen.missing(r.beats, r.unreadable)
	if len(missing) == 0 {
		return nil
	}
	for i, s := range stores {
		rs, ok := s.(*RedisStore)
		if !ok || r.failed[s.Addr()] != nil {
			continue
		}
		hbs, bad, err := rs.lookupBeats(ctx, missing)
		if err != nil {
			if own && i == 0 {
				return err
			}
			r.failed[s.Addr()] = err
			r.read = slices.DeleteFunc(r.read, func(a string) bool { return a == s.Addr() })
			continue
		}
		for _, hb := range hbs {
			r.beats = append(r.beats, beat{s, hb})
		}
		for _, u := range bad {
			u.store = s.Addr()
			r.unreadable = append(r.unreadable, u)
		}
	}
	return nil
}

// unreadableBeat is a heartbeat key, under a TTL, whose value does not
// decode as a heartbeat (too large for fleet.Decode, written by an older
// publisher that did not cut its beats, or damaged): its writer is alive.
// host and pid are read from the value when it is JSON at all, so that it
// is matched to its own process's locks only, and not to those of a dead
// process that went by the same instance name; both are empty when it is
// not.
type unreadableBeat struct {
	instance, host string
	pid            int
	store          string // the address of the store it was read from
}

func parseUnreadable(instance string, v []byte) unreadableBeat {
	var id struct {
		Host string `json:"host"`
		PID  int    `json:"pid"`
	}
	if json.Unmarshal(v, &id) != nil || id.Host == "" || id.PID <= 0 {
		return unreadableBeat{instance: instance}
	}
	return unreadableBeat{instance: instance, host: id.Host, pid: id.PID}
}

// ids are the identities of u's process, zero when its value names none.
func (u unreadableBeat) ids() [2]ident {
	if u.pid == 0 {
		return [2]ident{}
	}
	return [2]ident{hostPID(u.host, u.pid), instPID(u.instance, u.pid)}
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

// beatIDs are the identities a heartbeat's process is matched by.
func beatIDs(hb *fleet.Heartbeat) [2]ident {
	return [2]ident{hostPID(hb.Host, hb.PID), instPID(hb.Instance, hb.PID)}
}

// liveSet indexes the live heartbeats by identity, and the processes whose
// heartbeat key is present but unreadable.
type liveSet struct {
	ids        map[ident]*fleet.Heartbeat
	byInstance map[string]*fleet.Heartbeat
	// unreadableIDs are the identities of the unreadable keys' processes:
	// read from the value, or, for a value that names none, the identities
	// its instance was last seen with; unreadable are the instances of the
	// latter, matched by name as well.
	unreadable    map[string]bool
	unreadableIDs map[ident]bool
}

// newLiveSet indexes beats and the unreadable keys (see unreadableBeat).
func newLiveSet(beats []beat, unreadable []unreadableBeat, seen *seenSet) liveSet {
	l := liveSet{ids: map[ident]*fleet.Heartbeat{}, byInstance: map[string]*fleet.Heartbeat{},
		unreadable: map[string]bool{}, unreadableIDs: map[ident]bool{}}
	for _, b := range beats {
		for _, id := range beatIDs(b.hb) {
			if id != (ident{}) {
				l.ids[id] = b.hb
			}
		}
		l.byInstance[b.hb.Instance] = b.hb
	}
	for _, u := range unreadable {
		ids := u.ids()
		if ids == ([2]ident{}) {
			l.unreadable[u.instance] = true
			if seen != nil {
				ids = seen.names[u.instance].ids
			}
		}
		for _, id := range ids {
			if id != (ident{}) {
				l.unreadableIDs[id] = true
			}
		}
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

// alive reports whether h's process is known to be alive: it publishes a
// heartbeat, or a heartbeat key that does not decode is there for it: by
// the host and pid the key's value names, or, when the value names none,
// for the instance it was last seen as or the instance h names. A key
// that cannot be read still proves its process alive (it is written under
// a TTL of three intervals, and only keys under one count); what it holds
// is unknown, so none of the locks that may be its are called dead.
func (l liveSet) alive(h *lockvalue.Holder) bool {
	if l.live(h) != nil {
		return true
	}
	for _, id := range holderIDs(h) {
		if id != (ident{}) && l.unreadableIDs[id] {
			return true
		}
	}
	return h.Instance != "" && l.unreadable[h.Instance]
}

// seenSet remembers the identities of processes whose heartbeats were
// seen, with when, for retention, and the identities each instance name
// was last seen with (to match a heartbeat key that no longer decodes); it
// is bounded by the fleet seen within that time, not by the number of
// locks.
type seenSet struct {
	at        map[ident]time.Time
	names     map[string]nameSeen
	where     map[ident]*whereSeen
	retention time.Duration
}

// whereSeen is where a process was seen publishing (on, by store
// address), and which stores were read whole in the last read that saw it
// (checked): a store checked and not on is one it did not publish into
// then. Only the last read counts, and only within an unbroken run of
// reads (forgetChecked): a store read whole once, long ago or before a gap
// in which this detector did not watch (another agent led, its own store
// failed), says nothing about where the process publishes now.
type whereSeen struct {
	on, checked map[string]bool
}

// forgetChecked forgets which stores were read whole while each process
// was seen: what follows is not continuous with what was seen before (a
// new leader's term, a read that failed whole). A process not seen again
// since may then publish into any store not read: it is undecided, never
// dead, until that store is read.
func (s *seenSet) forgetChecked() {
	for _, w := range s.where {
		clear(w.checked)
	}
}

// saw notes that id was seen on store in a read of the stores read.
func (s *seenSet) saw(id ident, store string, read []string) {
	if id == (ident{}) {
		return
	}
	w := s.where[id]
	if w == nil {
		w = &whereSeen{on: map[string]bool{}, checked: map[string]bool{}}
		s.where[id] = w
	}
	if store != "" {
		w.on[store] = true
	}
	// The stores of this read (saw may run more than once in one read:
	// the same read each time).
	clear(w.checked)
	for _, r := range read {
		w.checked[r] = true
	}
}

// mayBeOn reports whether h's process, seen earlier, may publish its
// heartbeat into one of the stores not read (failed): it was seen on it,
// or the store was never read whole while the process was seen.
func (s *seenSet) mayBeOn(h *lockvalue.Holder, failed map[string]error) bool {
	if len(failed) == 0 {
		return false
	}
	for _, id := range holderIDs(h) {
		if _, ok := s.at[id]; id == (ident{}) || !ok {
			continue
		}
		w := s.where[id]
		for addr := range failed {
			if w == nil || w.on[addr] || !w.checked[addr] {
				return true
			}
		}
	}
	return false
}

type nameSeen struct {
	ids [2]ident
	at  time.Time
}

// record remembers the processes of beats and of the unreadable keys
// whose values name them, and keeps remembering those of the unreadable
// keys that do not (alive, but saying nothing about themselves) by the
// identities their instance was last seen with.
//
// read are the stores whose heartbeats were read whole: where each
// process seen was not, it did not publish then (whereSeen).
func (s *seenSet) record(beats []beat, unreadable []unreadableBeat, read []string, now time.Time) {
	if s.at == nil {
		s.at, s.names, s.where = map[ident]time.Time{}, map[string]nameSeen{}, map[ident]*whereSeen{}
	}
	for _, b := range beats {
		ids := beatIDs(b.hb)
		for _, id := range ids {
			if id != (ident{}) {
				s.at[id] = now
				s.saw(id, b.store.Addr(), read)
			}
		}
		s.names[b.hb.Instance] = nameSeen{ids, now}
	}
	for _, u := range unreadable {
		if ids := u.ids(); ids != ([2]ident{}) {
			for _, id := range ids {
				s.at[id] = now
				s.saw(id, u.store, read)
			}
			s.names[u.instance] = nameSeen{ids, now}
			continue
		}
		n, ok := s.names[u.instance]
		if !ok {
			continue
		}
		n.at = now
		s.names[u.instance] = n
		for _, id := range n.ids {
			if _, ok := s.at[id]; ok {
				s.at[id] = now
				s.saw(id, u.store, read)
			}
		}
	}
	for id, t := range s.at {
		if now.Sub(t) > s.retention {
			delete(s.at, id)
			delete(s.where, id)
		}
	}
	for inst, n := range s.names {
		if now.Sub(n.at) > s.retention {
			delete(s.names, inst)
		}
	}
}

// missing returns the instances seen within the retention that neither
// beats nor unreadable name, sorted.
func (s *seenSet) missing(beats []beat, unreadable []unreadableBeat) []string {
	if len(s.names) == 0 {
		return nil
	}
	present := make(map[string]bool, len(beats)+len(unreadable))
	for _, b := range beats {
		present[b.hb.Instance] = true
	}
	for _, u := range unreadable {
		present[u.instance] = true
	}
	var out []string
	for inst := range s.names {
		if !present[inst] {
			out = append(out, inst)
		}
	}
	sort.Strings(out)
	return out
}

// gone reports whether h's process published heartbeats earlier (within
// the retention) and is not alive now.
func (s *seenSet) gone(h *lockvalue.Holder, live liveSet) bool {
	return !h.Foreign && !live.alive(h) && s.seen(h)
}

// holderState is "live" when h's process is alive, "gone" when it was
// seen publishing and is not alive, "unknown" when it is not alive in the
// stores read but may publish into one not read (failed), and "" when it
// was never seen.
func (s *seenSet) holderState(h *lockvalue.Holder, live liveSet, failed map[string]error) string {
	switch {
	case live.alive(h):
		return "live"
	case !s.gone(h, live):
		return ""
	case s.mayBeOn(h, failed):
		return "unknown"
	}
	return "gone"
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
