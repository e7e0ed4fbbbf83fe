package detectors

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/shellquote"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// WorkerIDs checks the Snowflake WorkerIDs the fleet reports in its
// heartbeats against each other, against the slots in the store and
// against the declared service ranges:
//
//   - workerid_duplicate: two live instances report one service and id,
//     leaving out an instance whose slot names another holder and whose
//     beat was sent before that holder's claim (ClaimedAt): a process that
//     released the id in a handover still lists it in its last beat for up
//     to an interval, and if it kept issuing, workerid_lease_gone says so
//     from its next beat on;
//   - workerid_lease_gone: an instance reports an id whose slot key is gone
//     or held by another process, in two beats in a row (a process that
//     released its id on shutdown leaves a last beat behind for up to three
//     intervals; it publishes no newer one);
//   - workerid_out_of_range: an id outside its service's range (or the
//     layout);
//   - workerid_range_overlap: two services' declared ranges overlap.
type WorkerIDs struct {
	beats   []Store
	cfg     config
	mu      sync.Mutex
	pending map[string]time.Time // instance/service/id -> SentAt of the beat that first showed the slot gone
}

// NewWorkerIDs returns the WorkerID detector over the heartbeats and slots
// in s. Options: WithServiceRange, WithMaxWorkerID, WithWorkerIDPrefix,
// WithHeartbeatsFrom, WithMaxFindings, WithNow.
func NewWorkerIDs(s Store, opts ...Option) (*WorkerIDs, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	cfg, err := newConfig(DetectorWorkerID, opts, "WithServiceRange", "WithMaxWorkerID", "WithWorkerIDPrefix")
	if err != nil {
		return nil, err
	}
	return &WorkerIDs{beats: append([]Store{s}, cfg.beats...), cfg: cfg, pending: map[string]time.Time{}}, nil
}

// Name returns "workerid".
func (d *WorkerIDs) Name() string { return DetectorWorkerID }

// Detect reads the heartbeats and the slot of every reported WorkerID.
// When some stores' heartbeats cannot be read, it checks those of the
// others and returns their findings with a *PartialError: a duplicate seen
// is a duplicate, but none is ruled out (its scopes cover every
// workerid_duplicate, and every finding of the unread stores).
func (d *WorkerIDs) Detect(ctx context.Context) ([]Finding, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fr, err := readFleet(ctx, d.beats, false)
	if err != nil {
		return nil, err
	}
	beats := fr.beats
	out := newCapped(d.cfg.maxFindings)
	d.overlaps(out)
	type claimant struct {
		b   beat
		wid fleet.WorkerID
	}
	byID := map[string][]claimant{}
	var ids []string
	seenPending := map[string]bool{}
	for _, b := range beats {
		hb := b.hb
		for _, wid := range hb.WorkerIDs {
			key := wid.Key
			if key == "" {
				key = workerid.SlotKey(d.cfg.widPrefix, wid.ID)
			}
			gid := wid.Service + "\x00" + fmt.Sprint(wid.ID)
			if _, ok := byID[gid]; !ok {
				ids = append(ids, gid)
			}
			d.outOfRange(b, wid, key, out)
			superseded, err := d.leaseGone(ctx, b, wid, key, out, seenPending)
			if err != nil {
				return nil, err
			}
			if !superseded {
				byID[gid] = append(byID[gid], claimant{b, wid})
			}
		}
	}
	for k := range d.pending {
		// An instance whose beats are in an unread store is not seen: what
		// its last beat showed still holds.
		if !seenPending[k] && len(fr.failed) == 0 {
			delete(d.pending, k)
		}
	}
	sort.Strings(ids)
	for _, gid := range ids {
		cs := byID[gid]
		var insts []string
		for _, c := range cs {
			if !contains(insts, c.b.hb.Instance) {
				insts = append(insts, c.b.hb.Instance)
			}
		}
		if len(insts) < 2 {
			continue
		}
		sort.Strings(insts)
		c := cs[0]
		var who []string
		for _, c := range cs {
			who = append(who, holderString(c.b.hb))
		}
		sort.Strings(who)
		key := c.wid.Key
		if key == "" {
			key = workerid.SlotKey(d.cfg.widPrefix, c.wid.ID)
		}
		out.add(Finding{Detector: DetectorWorkerID, Kind: KindWorkerIDDuplicate, Severity: SeverityCritical,
			Store: c.b.store.Addr(), Key: key, Holder: HolderFromHeartbeat(c.b.hb),
			Detail: fmt.Sprintf("service %s WorkerID %d is reported by %d live instances (%s): their IDs can collide",
				c.wid.Service, c.wid.ID, len(insts), strings.Join(who, "; ")),
			Action: fmt.Sprintf("%s shows the instance the slot names: restart all the others; then look for duplicate IDs issued by service %s under WorkerID %d",
				slotGet(c.b.store, key), shellquote.Quote(c.wid.Service), c.wid.ID),
		})
	}
	// A duplicate may have a claimant in an unread store, whatever store
	// its finding names.
	return out.result(DetectorWorkerID, ""), fr.partial(append(fr.storeScopes(), Scope{Kind: KindWorkerIDDuplicate})...)
}

// slotGet begins an action with the command that reads a WorkerID slot
// and the comment that follows it: "CLI get KEY   # its". A heartbeat
// names the slot's key; one with a NUL, which no shell argument carries,
// would be read cut at the NUL, another key: the action then has no
// command and says so.
func slotGet(s Store, key string) string {
	if strings.Contains(key, "\x00") {
		return "# its key holds a NUL, which no shell argument carries (read it with a client library); that key"
	}
	return s.cli() + " get " + shellquote.Quote(key) + "   # it"
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

func (d *WorkerIDs) overlaps(out *capped) {
	svcs := make([]string, 0, len(d.cfg.ranges))
	for s := range d.cfg.ranges {
		svcs = append(svcs, s)
	}
	sort.Strings(svcs)
	for i, a := range svcs {
		for _, b := range svcs[i+1:] {
			ra, rb := d.cfg.ranges[a], d.cfg.ranges[b]
			if ra.Lo > rb.Hi || rb.Lo > ra.Hi {
				continue
			}
			out.add(Finding{Detector: DetectorWorkerID, Kind: KindWorkerIDRangeOverlap, Severity: SeverityWarning,
				Detail: fmt.Sprintf("service ranges overlap: %s [%d, %d] and %s [%d, %d] share WorkerIDs [%d, %d]; the two services contend for the same slots",
					a, ra.Lo, ra.Hi, b, rb.Lo, rb.Hi, max(ra.Lo, rb.Lo), min(ra.Hi, rb.Hi)),
				Action: fmt.Sprintf("# give services %s and %s disjoint ranges (workerid.WithServiceRange in both services and in the agent's config)",
					shellquote.Quote(a), shellquote.Quote(b)),
			})
		}
	}
}

func (d *WorkerIDs) outOfRange(b beat, wid fleet.WorkerID, key string, out *capped) {
	lo, hi := int64(0), d.cfg.maxWorkerID
	where := "the layout"
	if r, ok := d.cfg.ranges[wid.Service]; ok {
		lo, hi, where = r.Lo, r.Hi, "service "+wid.Service+"'s range"
	}
	if wid.ID >= lo && wid.ID <= hi {
		return
	}
	out.add(Finding{Detector: DetectorWorkerID, Kind: KindWorkerIDOutOfRange, Severity: SeverityWarning,
		Store: b.store.Addr(), Key: key, Holder: HolderFromHeartbeat(b.hb),
		Detail: fmt.Sprintf("%s reports WorkerID %d, outside %s [%d, %d]", holderString(b.hb), wid.ID, where, lo, hi),
		Action: fmt.Sprintf("# give the service's registry workerid.WithServiceRange(%+q, %d, %d) (the agent's ranges must match) and restart %s",
			wid.Service, lo, hi, shellquote.Quote(b.hb.Instance)),
	})
}

// leaseGone reads the slot of wid and reports it when it is gone or held
// by another process in two beats in a row of the instance. superseded is
// true when the slot names another process that claimed it after hb was
// sent: hb may predate a release, so hb is no claim on the id against the
// slot's holder.
func (d *WorkerIDs) leaseGone(ctx context.Context, b beat, wid fleet.WorkerID, key string, out *capped, seen map[string]bool) (superseded bool, err error) {
	hb := b.hb
	v, found, err := b.store.get(ctx, key)
	if err != nil {
		return false, err
	}
	problem := ""
	if !found {
		problem = "its slot " + key + " is gone"
	} else if c, ok := workerid.DecodeClaim(v); !ok {
		problem = "its slot " + key + " holds a value workerid did not write"
	} else if other := claimOther(c, wid, hb); other != "" {
		problem = "its slot " + key + " is held by " + other
		superseded = hb.SentAt.Before(c.ClaimedAt)
	}
	pk := hb.Instance + "\x00" + wid.Service + "\x00" + fmt.Sprint(wid.ID)
	if problem == "" {
		delete(d.pending, pk)
		return false, nil
	}
	seen[pk] = true
	first, ok := d.pending[pk]
	if !ok {
		d.pending[pk] = hb.SentAt
		return superseded, nil
	}
	if !hb.SentAt.After(first) {
		return superseded, nil // no newer beat yet: the process may have released the id on shutdown
	}
	out.add(Finding{Detector: DetectorWorkerID, Kind: KindWorkerIDLeaseGone, Severity: SeverityCritical,
		Store: b.store.Addr(), Key: key, Holder: HolderFromHeartbeat(hb), Age: max(d.cfg.now().Sub(first), 0),
		Detail: fmt.Sprintf("%s still reports WorkerID %d of service %s, but %s; its generator must have stopped issuing (ErrWorkerLeaseLost) - if it has not, its IDs can collide",
			holderString(hb), wid.ID, wid.Service, problem),
		Action: fmt.Sprintf("%s shows who holds the slot; restart %s so that it claims a WorkerID again",
			slotGet(b.store, key), shellquote.Quote(hb.Instance)),
	})
	return superseded, nil
}

// claimOther describes the claim's process when it is not hb's, else "".
// The claim names service, hostname and pid; hostname is compared with both
// the heartbeat's host and instance (a registry may override it).
func claimOther(c workerid.Claim, wid fleet.WorkerID, hb *fleet.Heartbeat) string {
	same := c.Service == wid.Service && c.WorkerID == wid.ID &&
		(c.PID == 0 || hb.PID == 0 || c.PID == hb.PID) &&
		(c.Hostname == "" || hb.Host == "" || c.Hostname == hb.Host || c.Hostname == hb.Instance)
	if same {
		return ""
	}
	return fmt.Sprintf("service %s on host %s pid %d (claimed %s)", c.Service, c.Hostname, c.PID, c.ClaimedAt.UTC().Format(time.RFC3339))
}
