package fleet

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/internal/telemetry"
	"github.com/lockgov/lockgov/policy"
)

// publishers is the process's set of running publishers, keyed by
// Store.ID. It is package-level state on purpose, the one place lockgov
// keeps any: "one heartbeat per process and store" is a property of the
// process, not of a Locker. Every governed Locker and WorkerID lease on one
// store attaches to the same publisher, so the store holds one heartbeat
// key per process, listing everything the process holds there, however
// many Lockers it built. The first attachment starts the publisher, the
// last one to close stops it.
//
// byStamp finds a running publisher by the stamp its beats carry: a beat
// that replaces another publisher's of this process has found a sibling
// (see publisher.replaced).
var publishers = struct {
	mu      sync.Mutex
	m       map[string]*publisher
	byStamp map[string]*publisher
}{m: map[string]*publisher{}, byStamp: map[string]*publisher{}}

// Attachment is one user's share of the process's publisher for a store: a
// governed Locker's or a WorkerID lease's. Close it when done (Govern and
// workerid do).
type Attachment struct {
	p      *publisher
	s      Store
	closed atomic.Bool
}

// publisher writes one heartbeat per interval into one store.
type publisher struct {
	id      string
	backend string
	cfg     config
	started time.Time
	m       pubMetrics

	mu      sync.Mutex
	atts    []*Attachment // live attachments, oldest first
	timer   *time.Timer
	stopped bool

	beatMu sync.Mutex    // held by the beat in flight; shutdown waits for it
	rtt    time.Duration // last round trip to the store (a sample or the write); beatMu
	wrote  bool          // a beat of this publisher was written; beatMu

	// stamp is the Publisher every beat carries: random, one per publisher,
	// beginning with processStamp.
	stamp string
	// sibs are the other publishers of this process found writing this
	// one's heartbeat key: one store reached under two IDs (two clients of
	// one Redis under two addresses, a Sentinel client and a direct one).
	// Each beat lists what all of them track; a sibling's siblings are
	// this one's (see linkLocked). Under publishers.mu.
	sibs map[*publisher]struct{}

	trackMu sync.Mutex
	held    map[any]HeldLock
	waiting map[any]WaitingLock
	workers map[any]WorkerID

	skew     atomic.Pointer[skewNow]
	sample   atomic.Pointer[ClockSample] // last measurement, for the heartbeat
	warnMu   sync.Mutex
	lastWarn map[string]time.Time // log line kind -> last logged
}

type skewNow struct {
	offset time.Duration
	tier   policy.Tier
}

type pubMetrics struct {
	beats  *prometheus.CounterVec
	offset *prometheus.GaugeVec
}

// Attach attaches to the process's publisher for s, starting it (its first
// beat at once, in the background) when s has none yet. The options of the
// attachment that starts a publisher configure it; later attachments share
// it as it is. Attach never waits for the store.
func Attach(s Store, opts ...Option) (*Attachment, error) {
	if s == nil {
		return nil, errors.New("fleet: nil store")
	}
	id := s.ID()
	if id == "" {
		return nil, errors.New("fleet: store without an identity")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	publishers.mu.Lock()
	defer publishers.mu.Unlock()
	p := publishers.m[id]
	if p == nil {
		if p, err = newPublisher(id, s.Backend(), cfg); err != nil {
			return nil, err
		}
		publishers.m[id] = p
		publishers.byStamp[p.stamp] = p
	}
	a := &Attachment{p: p, s: s}
	p.mu.Lock()
	p.atts = append(p.atts, a)
	if p.timer == nil {
		p.timer = time.AfterFunc(0, p.beat)
	}
	p.mu.Unlock()
	return a, nil
}

func newPublisher(id, backend string, cfg config) (*publisher, error) {
	m := pubMetrics{
		beats:  telemetry.FleetHeartbeatsTotal.CounterVec(nil),
		offset: telemetry.ClockOffsetSeconds.GaugeVec(nil),
	}
	var err error
	telemetry.Register(cfg.reg, &m.beats, &err)
	telemetry.Register(cfg.reg, &m.offset, &err)
	if err != nil {
		return nil, fmt.Errorf("fleet: register metrics: %w", err)
	}
	return &publisher{
		id: id, backend: backend, cfg: cfg, started: cfg.now(), m: m,
		stamp:    processStamp + "-" + randomHex(),
		sibs:     map[*publisher]struct{}{},
		held:     map[any]HeldLock{},
		waiting:  map[any]WaitingLock{},
		workers:  map[any]WorkerID{},
		lastWarn: map[string]time.Time{},
	}, nil
}

// processStamp begins the stamp of every publisher of this process run: a
// beat of one that has stopped (a sibling, this store's previous publisher)
// is known as this process's by it, which its host name and pid cannot
// tell: containers sharing the host's network have one host name, and each
// runs its service as pid 1.
var processStamp = randomHex()

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// CheckOptions reports the error Attach would return for opts, for
// constructors that attach later.
func CheckOptions(opts ...Option) error {
	_, err := newConfig(opts)
	return err
}

// Close detaches. The last attachment of a store stops its publisher and
// deletes the heartbeat, waiting for a beat in flight (each is bounded by
// the publisher's timeout); a publisher with a sibling still running (the
// same store under another ID) leaves the heartbeat to it. Closing twice
// does nothing.
func (a *Attachment) Close() error {
	if !a.closed.CompareAndSwap(false, true) {
		return nil
	}
	p := a.p
	publishers.mu.Lock()
	p.mu.Lock()
	p.atts = slices.DeleteFunc(p.atts, func(x *Attachment) bool { return x == a })
	last := len(p.atts) == 0
	if last {
		p.stopped = true
		p.timer.Stop()
		delete(publishers.m, p.id)
		delete(publishers.byStamp, p.stamp) // no new sibling finds it
	}
	p.mu.Unlock()
	publishers.mu.Unlock()
	if !last {
		return nil
	}
	p.beatMu.Lock() // a beat in flight finishes before the key is deleted
	defer p.beatMu.Unlock()
	// Only now, its last write done, does p leave its siblings: of siblings
	// stopping together the last to finish its writes deletes the key.
	// Unlinked at once, p would leave the key to a sibling whose delete
	// may come before p's write in flight lands, and the key outlives both.
	if p.unlink() {
		// The sibling's next beat rewrites the key without this
		// publisher's locks; deleting it would hide the process until then.
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.timeout)
	defer cancel()
	if err := a.s.Delete(ctx, p.cfg.instance); err != nil {
		return fmt.Errorf("fleet: delete heartbeat of %s (%s): %w", p.cfg.instance, p.backend, err)
	}
	return nil
}

// Instance is the name the heartbeat is published under.
func (a *Attachment) Instance() string { return a.p.cfg.instance }

// Skew returns the process's last measured offset to the store; ok is false
// until there is one (and on etcd while no agent has written a TierReport).
// It is an atomic load: the hot path calls it.
func (a *Attachment) Skew() (offset time.Duration, ok bool) {
	if s := a.p.skew.Load(); s != nil {
		return s.offset, true
	}
	return 0, false
}

// Tier returns the tier of the last measured offset (TierOK without one).
func (a *Attachment) Tier() policy.Tier {
	if s := a.p.skew.Load(); s != nil {
		return s.tier
	}
	return policy.TierOK
}

// TrackHeld lists a held lock in the heartbeat until UntrackHeld(id).
func (a *Attachment) TrackHeld(id any, h HeldLock) { track(a.p, a.p.held, id, h) }

// UntrackHeld removes what TrackHeld(id) listed.
func (a *Attachment) UntrackHeld(id any) { untrack(a.p, a.p.held, id) }

// TrackWaiting lists a key a goroutine waits for until UntrackWaiting(id).
func (a *Attachment) TrackWaiting(id any, w WaitingLock) { track(a.p, a.p.waiting, id, w) }

// UntrackWaiting removes what TrackWaiting(id) listed.
func (a *Attachment) UntrackWaiting(id any) { untrack(a.p, a.p.waiting, id) }

// TrackWorkerID lists a held WorkerID until UntrackWorkerID(id).
func (a *Attachment) TrackWorkerID(id any, w WorkerID) { track(a.p, a.p.workers, id, w) }

// UntrackWorkerID removes what TrackWorkerID(id) listed.
func (a *Attachment) UntrackWorkerID(id any) { untrack(a.p, a.p.workers, id) }

func track[T any](p *publisher, m map[any]T, id any, v T) {
	p.trackMu.Lock()
	m[id] = v
	p.trackMu.Unlock()
}

func untrack[T any](p *publisher, m map[any]T, id any) {
	p.trackMu.Lock()
	delete(m, id)
	p.trackMu.Unlock()
}

// stores returns the live attachments' stores, newest first: a newer client
// is the likelier to be open (an older one may have been closed by a user
// who has not closed its Locker yet).
func (p *publisher) stores() []Store {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	out := make([]Store, 0, len(p.atts))
	for i := len(p.atts) - 1; i >= 0; i-- {
		out = append(out, p.atts[i].s)
	}
	return out
}

// beat measures the clock, writes the heartbeat and schedules the next. It
// runs on its timer's goroutine, never on a caller's.
func (p *publisher) beat() {
	p.beatMu.Lock()
	defer p.beatMu.Unlock()
	stores := p.stores()
	if len(stores) == 0 {
		return
	}
	// The timeout bounds the beat's round trips to the store, not the
	// encoding between them: a beat of thousands of locks takes tens of
	// milliseconds of CPU to encode and cut, which on a loaded machine
	// would eat a short interval's timeout. The clock samples get half of
	// it at most, so that the write always has the other half: on a store
	// whose round trip is a fifth of the timeout, five samples once took
	// all of it, and no beat was ever written. Within their half they stop
	// before a sample the deadline would cut (see measureOffset): a cut
	// sample costs the write its connection.
	start := time.Now()
	mctx, mcancel := context.WithTimeout(context.Background(), p.cfg.timeout/2)
	p.measure(mctx, stores[0])
	mcancel()
	left := p.cfg.timeout - time.Since(start)
	data, err := encodeWithin(p.snapshot(), MaxBeatBytes)
	ctx, cancel := context.WithTimeout(context.Background(), left)
	defer cancel()
	if err == nil {
		for _, s := range stores {
			t0 := time.Now()
			var prev []byte
			if sw, ok := s.(Swapper); ok {
				prev, err = sw.Swap(ctx, p.cfg.instance, data, 3*p.cfg.interval)
			} else {
				err = s.Put(ctx, p.cfg.instance, data, 3*p.cfg.interval)
			}
			if err == nil {
				// The next beat's samples are judged by it: a store
				// whose samples no longer fit is measured again once
				// its writes say it is near enough.
				p.rtt = time.Since(t0)
				p.replaced(prev)
				break
			}
		}
	}
	if err != nil {
		p.m.beats.WithLabelValues(p.backend, "error").Inc()
		p.warn("beat", "lockgov: heartbeat not written; the agent will see this process as gone after 3 intervals",
			"instance", p.cfg.instance, "backend", p.backend, "error", err)
	} else {
		p.m.beats.WithLabelValues(p.backend, "ok").Inc()
	}
	p.mu.Lock()
	if !p.stopped {
		p.timer.Reset(p.cfg.interval)
	}
	p.mu.Unlock()
}

// replaced looks at the beat this publisher's write replaced (beatMu):
// one of its own is the rule. One of another publisher of this process
// means both write one key (one store under two IDs): they become siblings,
// and from their next beats on each lists what both track. One of another
// process, written since this publisher's last beat, means two processes
// share this instance name and the agent sees one of them at a time: that
// is logged (at most once a minute). A beat there before this publisher's
// first (the name's previous process, restarted) or one of a sibling that
// has stopped since is neither.
func (p *publisher) replaced(prev []byte) {
	wrote := p.wrote
	p.wrote = true
	if prev == nil {
		return
	}
	stamp := StampOf(prev)
	if stamp == p.stamp {
		return
	}
	publishers.mu.Lock()
	if q := publishers.byStamp[stamp]; q != nil && stamp != "" {
		if _, ok := p.sibs[q]; !ok && !p.stoppedLocked() {
			linkLocked(p, q)
		}
		publishers.mu.Unlock()
		return
	}
	publishers.mu.Unlock()
	if !wrote || strings.HasPrefix(stamp, processStamp+"-") {
		return // the name's previous process; a stopped publisher of this one
	}
	hb, err := Decode(prev)
	if err != nil {
		p.warn("instance", "lockgov: another process writes this process's heartbeat key, in a form this version cannot read; the agent sees one of them at a time (give each process its own WithInstance name)",
			"instance", p.cfg.instance, "backend", p.backend, "error", err)
		return
	}
	p.warn("instance", "lockgov: another process publishes its heartbeat under this instance name; the agent sees one of them at a time (give each process its own WithInstance name)",
		"instance", p.cfg.instance, "backend", p.backend, "other_host", hb.Host, "other_pid", hb.PID, "other_service", hb.Service)
}

// linkLocked makes p and q siblings, and each of their siblings a sibling
// of the other's (under publishers.mu): all of them write one key. A link
// is found only between two publishers whose writes follow each other, so
// with three IDs of one store the first and the third may never meet: the
// first would list neither the third's locks nor leave the key to it.
func linkLocked(p, q *publisher) {
	group := []*publisher{p, q}
	for x := range p.sibs {
		group = append(group, x)
	}
	for x := range q.sibs {
		group = append(group, x)
	}
	for _, x := range group {
		for _, y := range group {
			if x != y {
				x.sibs[y] = struct{}{}
			}
		}
	}
}

// stoppedLocked reports whether p has stopped (under publishers.mu, which
// Close holds while it stops a publisher and takes it out of byStamp).
func (p *publisher) stoppedLocked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// unlink takes a stopped p, its last write done, out of its siblings'
// sets, and reports whether a sibling is left to write the key: one still
// running, or one stopping that has not unlinked yet (its write in flight
// may still land, and it deletes the key once that is done).
func (p *publisher) unlink() bool {
	publishers.mu.Lock()
	defer publishers.mu.Unlock()
	shared := len(p.sibs) > 0
	for q := range p.sibs {
		delete(q.sibs, p)
	}
	clear(p.sibs)
	return shared
}

// siblings returns p's running siblings (see publisher.sibs): a stopped
// one's locks are no longer the process's, though it stays a sibling until
// its last write is done (see Attachment.Close).
func (p *publisher) siblings() []*publisher {
	publishers.mu.Lock()
	defer publishers.mu.Unlock()
	var out []*publisher
	for q := range p.sibs {
		if !q.stoppedLocked() {
			out = append(out, q)
		}
	}
	return out
}

// measure updates the process's offset to the store: from the store's clock
// when it has one, else from the agent's TierReport. A failed or skipped
// measurement keeps the last one, whose MeasuredAt says how old it is: a
// store that cannot be reached cannot grant locks either, and dropping it
// would apply no tier, which is no safer than an old one.
func (p *publisher) measure(ctx context.Context, s Store) {
	sample, rtt, err := measureOffset(ctx, s, p.cfg.now, p.rtt)
	p.rtt = rtt
	if errors.Is(err, ErrNoStoreTime) {
		sample, err = p.agentSample(ctx, s)
		if err == nil && sample == nil {
			p.skew.Store(nil)
			p.sample.Store(nil)
			return
		}
	}
	if err != nil {
		if last := p.sample.Load(); last != nil {
			p.warn("measure", "lockgov: clock offset to the lock store not measured; the last measurement stays in force",
				"instance", p.cfg.instance, "backend", p.backend, "measured_at", last.MeasuredAt, "error", err)
		}
		return
	}
	tier := p.cfg.tiers.Tier(sample.Certain())
	p.skew.Store(&skewNow{offset: sample.Offset, tier: tier})
	p.sample.Store(sample)
	p.m.offset.WithLabelValues(p.backend).Set(sample.Offset.Seconds())
	switch tier {
	case policy.TierDegrade:
		p.warn("skew", "lockgov: clock offset to the lock store is in the degrade tier: new leases get shortened TTLs",
			"instance", p.cfg.instance, "backend", p.backend, "offset", sample.Offset, "source", sample.Source)
	case policy.TierReject:
		p.warn("skew", "lockgov: clock offset to the lock store is in the reject tier: new locks and IDs are refused with ErrClockSkew",
			"instance", p.cfg.instance, "backend", p.backend, "offset", sample.Offset, "source", sample.Source)
	}
}

func (p *publisher) agentSample(ctx context.Context, s Store) (*ClockSample, error) {
	data, err := s.TierReport(ctx, p.cfg.instance)
	if err != nil || data == nil {
		return nil, err
	}
	r, err := DecodeTierReport(data)
	if err != nil {
		p.warn("report", "lockgov: unreadable clock tier report ignored", "instance", p.cfg.instance, "error", err)
		return nil, nil
	}
	return &ClockSample{Offset: r.Offset, MeasuredAt: r.MeasuredAt, Source: ClockSourceAgent}, nil
}

// warn logs at most once a minute per kind.
func (p *publisher) warn(kind, msg string, args ...any) {
	now := time.Now()
	p.warnMu.Lock()
	last, seen := p.lastWarn[kind]
	if seen && now.Sub(last) < time.Minute {
		p.warnMu.Unlock()
		return
	}
	p.lastWarn[kind] = now
	p.warnMu.Unlock()
	p.cfg.logger.Warn(msg, args...)
}

// snapshot is the heartbeat as of now. Locks are listed oldest first and
// cut at MaxLocks; encodeWithin cuts them to MaxBeatBytes.
func (p *publisher) snapshot() *Heartbeat {
	hb := &Heartbeat{
		Publisher: p.stamp,
		Instance:  p.cfg.instance,
		Service:   p.cfg.service,
		Version:   version(),
		Host:      p.cfg.host,
		PID:       os.Getpid(),
		StartedAt: p.started.UTC(),
		SentAt:    p.cfg.now().UTC(),
		Interval:  p.cfg.interval,
		Clock:     p.sample.Load(),
	}
	if s := p.skew.Load(); s != nil {
		hb.Tier = s.tier.String()
	}
	for _, q := range append([]*publisher{p}, p.siblings()...) {
		q.trackMu.Lock()
		for _, w := range q.workers {
			hb.WorkerIDs = append(hb.WorkerIDs, w)
		}
		for _, h := range q.held {
			hb.Held = append(hb.Held, h)
		}
		for _, w := range q.waiting {
			hb.Waiting = append(hb.Waiting, w)
		}
		q.trackMu.Unlock()
	}
	slices.SortFunc(hb.WorkerIDs, func(a, b WorkerID) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(hb.Held, func(a, b HeldLock) int { return a.Since.Compare(b.Since) })
	slices.SortFunc(hb.Waiting, func(a, b WaitingLock) int { return a.Since.Compare(b.Since) })
	if len(hb.Held) > MaxLocks {
		hb.Held, hb.Truncated = hb.Held[:MaxLocks], true
	}
	if len(hb.Waiting) > MaxLocks {
		hb.Waiting, hb.Truncated = hb.Waiting[:MaxLocks], true
	}
	return hb
}

// encodeWithin encodes hb in at most limit bytes: while its encoding is
// larger, it drops the newest of hb's Held and Waiting entries (both are
// sorted oldest first) and sets Truncated. A beat over MaxBeatBytes is one
// Decode refuses: the agent would not see the process at all. What is left
// out is the newest locks and waits, which the next beats list once older
// ones end. It fails only when hb is too large without any lock.
func encodeWithin(hb *Heartbeat, limit int) ([]byte, error) {
	data, err := Encode(hb)
	for err == nil && len(data) > limit {
		if len(hb.Held) == 0 && len(hb.Waiting) == 0 {
			return nil, fmt.Errorf("fleet: heartbeat of %d bytes without any lock listed, more than %d", len(data), limit)
		}
		hb.Truncated = true
		// Drop entries worth the excess at once (each costs its encoding
		// and a comma), then encode again: the lists' own brackets and
		// Truncated are settled by the next round.
		for excess := len(data) - limit; excess > 0 && len(hb.Held)+len(hb.Waiting) > 0; {
			var e any
			nh, nw := len(hb.Held), len(hb.Waiting)
			if nw == 0 || nh > 0 && !hb.Held[nh-1].Since.Before(hb.Waiting[nw-1].Since) {
				e, hb.Held = hb.Held[nh-1], hb.Held[:nh-1]
			} else {
				e, hb.Waiting = hb.Waiting[nw-1], hb.Waiting[:nw-1]
			}
			b, err := json.Marshal(e)
			if err != nil {
				return nil, err
			}
			excess -= len(b) + 1
		}
		if len(hb.Held) == 0 {
			hb.Held = nil
		}
		if len(hb.Waiting) == 0 {
			hb.Waiting = nil
		}
		data, err = Encode(hb)
	}
	return data, err
}
