package snowflake

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

const nsPerMs = int64(time.Millisecond)

// Generator issues IDs for one WorkerID. It is safe for concurrent use. Issuing an ID takes
// no lock: the whole state, the last millisecond used and the sequence within it, is one
// uint64 updated by compare-and-swap; a caller that loses it steps aside briefly (stepAside).
// When the sequence is used up (or the clock stepped back), one caller at a time spins on the
// clock and the other callers who must wait park until it is done, honouring their contexts;
// see waitTurn.
type Generator struct {
	// state has a cache line to itself: every ID writes it, and under contention each write
	// takes the line from the other cores; sharing it with the fields every call only reads
	// (the layout's shifts and masks, offset) made each of those reads a miss too.
	_ [64]byte
	// state is (milliseconds since the epoch) << seqBits | sequence of the last ID issued.
	state atomic.Uint64
	_     [56]byte
	// spinning is set while a caller waits for the clock; parked counts the callers waiting
	// for it to finish (waitTurn). Written only on a used-up millisecond, not per ID.
	spinning atomic.Bool
	parked   atomic.Int32
	_        [56]byte
	// offset is wall - epoch - mono in ns: mono + offset is the wall clock in ns since the
	// epoch, as of the last wall-clock read. It is refreshed on every new millisecond.
	offset atomic.Int64

	seqBits    uint
	seqMask    uint64
	timeShift  uint
	workerPart int64
	maxMs      int64
	epochNs    int64
	epochMs    int64
	maxWait    time.Duration
	wake       chan struct{} // wake-ups for parked callers: see waitTurn
	clock      Clock
	lease      WorkerLease
	hooks      Hooks
	skew       SkewSource
	layout     Layout
	epoch      time.Time
	worker     int64
}

// New returns a Generator for workerID.
func New(workerID int64, opts ...Option) (*Generator, error) {
	c := config{layout: DefaultLayout, epoch: DefaultEpoch, maxWait: DefaultMaxWait}
	for _, o := range opts {
		o.apply(&c)
	}
	if err := c.layout.Validate(); err != nil {
		return nil, err
	}
	if workerID < 0 || workerID > c.layout.MaxWorker() {
		return nil, fmt.Errorf("%w: worker id %d out of range [0, %d] for layout %s", ErrInvalid, workerID, c.layout.MaxWorker(), c.layout)
	}
	if c.maxWait < 0 {
		return nil, fmt.Errorf("%w: negative max wait %s", ErrInvalid, c.maxWait)
	}
	g := &Generator{
		seqBits:    uint(c.layout.SequenceBits),
		seqMask:    uint64(c.layout.MaxSequence()),
		timeShift:  uint(c.layout.WorkerBits + c.layout.SequenceBits),
		workerPart: workerID << c.layout.SequenceBits,
		maxMs:      int64(1)<<c.layout.TimeBits - 1,
		epochNs:    c.epoch.UnixNano(),
		epochMs:    c.epoch.UnixMilli(),
		maxWait:    c.maxWait,
		wake:       make(chan struct{}, 64),
		clock:      c.clock,
		lease:      c.lease,
		hooks:      c.hooks,
		skew:       c.skew,
		layout:     c.layout,
		epoch:      c.epoch,
		worker:     workerID,
	}
	wall := time.Now()
	if c.clock != nil {
		wall = c.clock.Wall()
	}
	if err := c.layout.ValidateEpoch(c.epoch, wall); err != nil {
		return nil, err
	}
	now := wall.UnixNano()
	if c.lease != nil {
		if id := c.lease.WorkerID(); id != workerID {
			return nil, fmt.Errorf("%w: lease is for worker id %d, generator for %d", ErrInvalid, id, workerID)
		}
		if ll, ok := c.lease.(layoutLease); ok {
			if l, ok := ll.Layout(); ok && !l.same(c.layout) {
				return nil, fmt.Errorf("%w: lease for worker id %d is for layout %s, generator has layout %s: every generator on a WorkerID's key prefix must use the same layout and epoch, and its workerid Registry be built WithLayout and WithEpoch with them", ErrInvalid, workerID, l, c.layout)
			}
		}
		if el, ok := c.lease.(epochLease); ok {
			if e, ok := el.Epoch(); ok && !e.Equal(c.epoch) {
				return nil, fmt.Errorf("%w: lease for worker id %d is for epoch %s, generator has epoch %s: every generator on a WorkerID's key prefix must use the same layout and epoch, and its workerid Registry be built WithLayout and WithEpoch with them", ErrInvalid, workerID, e.UTC().Format(time.RFC3339Nano), c.epoch.UTC().Format(time.RFC3339Nano))
			}
		}
		if b, ok := c.lease.(generatorBinder); ok {
			if !b.BindGenerator(g.LastTime) {
				return nil, fmt.Errorf("%w: lease for worker id %d is already bound to a generator: share that generator (it is safe for concurrent use) or claim another lease", ErrInvalid, workerID)
			}
		} else if t, ok := c.lease.(lastUsedTracker); ok {
			t.TrackLastUsed(g.LastTime)
		}
		if r, ok := c.lease.(skewReporter); ok && g.skew == nil {
			g.skew = r.ClockSkew
		}
	}
	g.offset.Store(now - g.epochNs - g.mono())
	return g, nil
}

func (g *Generator) mono() int64 {
	if g.clock == nil {
		return int64(time.Since(monoBase))
	}
	return int64(g.clock.Mono())
}

func (g *Generator) wall() int64 {
	if g.clock == nil {
		return time.Now().UnixNano()
	}
	return g.clock.Wall().UnixNano()
}

func (g *Generator) compose(s uint64) int64 {
	return int64(s>>g.seqBits)<<g.timeShift | g.workerPart | int64(s&g.seqMask)
}

// NextID returns the next ID. It waits, honouring ctx, when the millisecond's sequence is
// used up or the clock stepped back by at most MaxWait; it returns *ClockBackwardsError for
// a larger step, ErrWorkerLeaseLost when bound to a lease that may have expired,
// *ClockSkewError while the skew source rejects, and ErrLifetimeOver past the layout's end.
func (g *Generator) NextID(ctx context.Context) (int64, error) {
	if err := g.checkSkew(); err != nil {
		return 0, err
	}
	for {
		old := g.state.Load() // before the clock read: see slow
		mono := g.mono()
		ms := (mono + g.offset.Load()) / nsPerMs
		fast := true
		if g.lease != nil {
			floor, limit, err := g.checkLease(mono)
			if err != nil {
				return 0, err
			}
			fast = floor < int64(old>>g.seqBits) && ms <= limit
		}
		if fast && ms == int64(old>>g.seqBits) && old&g.seqMask != g.seqMask {
			// Lost races are retried without another clock read while the state stays in
			// the millisecond just read: under contention the clock read is the cost.
			for {
				if g.state.CompareAndSwap(old, old+1) {
					return g.compose(old + 1), nil
				}
				stepAside()
				old = g.state.Load()
				if int64(old>>g.seqBits) != ms || old&g.seqMask == g.seqMask {
					break
				}
			}
			continue
		}
		id, ok, err := g.slow(ctx, old, mono)
		if ok || err != nil {
			return id, err
		}
	}
}

// Fill writes len(dst) IDs into dst, in increasing order, with one compare-and-swap per
// millisecond's worth of sequence numbers. It fails like NextID; IDs already written to dst
// before an error are valid and issued.
func (g *Generator) Fill(ctx context.Context, dst []int64) error {
	if len(dst) == 0 {
		return fmt.Errorf("%w: batch of 0 IDs", ErrInvalid)
	}
	if err := g.checkSkew(); err != nil {
		return err
	}
	for i := 0; i < len(dst); {
		old := g.state.Load()
		mono := g.mono()
		ms := (mono + g.offset.Load()) / nsPerMs
		fast := true
		if g.lease != nil {
			floor, limit, err := g.checkLease(mono)
			if err != nil {
				return err
			}
			fast = floor < int64(old>>g.seqBits) && ms <= limit
		}
		if seq := old & g.seqMask; fast && ms == int64(old>>g.seqBits) && seq != g.seqMask {
			k := min(uint64(len(dst)-i), g.seqMask-seq)
			if g.state.CompareAndSwap(old, old+k) {
				base := g.compose(old)
				for j := int64(1); j <= int64(k); j++ {
					dst[i] = base + j
					i++
				}
			}
			continue
		}
		id, ok, err := g.slow(ctx, old, mono)
		if err != nil {
			return err
		}
		if ok {
			dst[i] = id
			i++
		}
	}
	return nil
}

// NextN returns n IDs in increasing order (see Fill).
func (g *Generator) NextN(ctx context.Context, n int) ([]int64, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: batch of %d IDs, want n > 0", ErrInvalid, n)
	}
	ids := make([]int64, n)
	if err := g.Fill(ctx, ids); err != nil {
		return nil, err
	}
	return ids, nil
}

// slow reads the wall clock and handles everything but "same millisecond, room left": a new
// millisecond, an exhausted sequence, a clock behind the state, a lease. It returns ok when
// it issued id, (0, false, nil) when the caller should retry.
//
// old was loaded before the clock was read. Every state was stored by a caller whose clock
// read came before its store, so a clock reading below old's millisecond means the clock
// itself went backwards, never that another goroutine merely read it later.
func (g *Generator) slow(ctx context.Context, old uint64, mono int64) (int64, bool, error) {
	ns := g.wall() - g.epochNs
	g.offset.Store(ns - mono)
	ms := ns / nsPerMs
	if ns < 0 {
		ms = (ns - nsPerMs + 1) / nsPerMs
	}
	last, seq := int64(old>>g.seqBits), old&g.seqMask
	if g.lease != nil {
		floor, limit, err := g.checkLease(mono)
		if err != nil {
			return 0, false, err
		}
		if ms > limit {
			return 0, false, fmt.Errorf("%w: clock is past the high-water mark the lease reserved (%s)", ErrWorkerLeaseLost, time.UnixMilli(limit+g.epochMs).UTC().Format(time.RFC3339Nano))
		}
		if floor >= last {
			last, seq = floor, g.seqMask // issue strictly above the high-water mark
		}
	}
	switch {
	case ms > last:
		if ms > g.maxMs {
			return 0, false, fmt.Errorf("%w: layout %s ended at %s", ErrLifetimeOver, g.layout, g.End().Format(time.RFC3339))
		}
		next := uint64(ms) << g.seqBits
		if g.state.CompareAndSwap(old, next) {
			return g.compose(next), true, nil
		}
		return 0, false, nil
	case ms == last && seq < g.seqMask: // only reachable when last is old's own millisecond
		if g.state.CompareAndSwap(old, old+1) {
			return g.compose(old + 1), true, nil
		}
		return 0, false, nil
	}
	target := last
	if seq == g.seqMask {
		target = last + 1
	}
	if ms < last {
		off := time.Duration(last*nsPerMs - ns)
		if off > g.maxWait {
			if g.hooks.ClockBackwards != nil {
				g.hooks.ClockBackwards(off, true)
			}
			return 0, false, &ClockBackwardsError{Offset: off}
		}
		if g.hooks.ClockBackwards != nil {
			g.hooks.ClockBackwards(off, false)
		}
	} else if g.hooks.SequenceExhausted != nil {
		g.hooks.SequenceExhausted()
	}
	return 0, false, g.waitTurn(ctx, target*nsPerMs)
}

// checkLease returns the high-water floor and the reserved limit in ms since the epoch.
func (g *Generator) checkLease(mono int64) (floor, limit int64, err error) {
	st := g.lease.State()
	if st.Err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrWorkerLeaseLost, st.Err)
	}
	if g.clock != nil { // the lease deadline is on the real monotonic clock
		mono = int64(time.Since(monoBase))
	}
	if st.ValidUntil.IsZero() || mono >= int64(st.ValidUntil.Sub(monoBase)) {
		return 0, 0, fmt.Errorf("%w: worker %d: lease could have expired", ErrWorkerLeaseLost, g.worker)
	}
	floor, limit = -1, math.MaxInt64
	if st.FloorUnixMilli != 0 {
		floor = st.FloorUnixMilli - g.epochMs
	}
	if st.LimitUnixMilli != 0 {
		limit = st.LimitUnixMilli - g.epochMs
	}
	return floor, limit, nil
}

// WorkerID returns the generator's WorkerID.
func (g *Generator) WorkerID() int64 { return g.worker }

// Layout returns the generator's layout.
func (g *Generator) Layout() Layout { return g.layout }

// Epoch returns the generator's epoch.
func (g *Generator) Epoch() time.Time { return g.epoch }

// End returns the instant the layout runs out of time bits.
func (g *Generator) End() time.Time { return g.layout.End(g.epoch) }

// LastTime returns the millisecond of the last ID issued, the zero time if none was.
func (g *Generator) LastTime() time.Time {
	s := g.state.Load()
	if s == 0 {
		return time.Time{}
	}
	return time.UnixMilli(g.epochMs + int64(s>>g.seqBits)).UTC()
}

// Decode splits an ID of this generator's layout and epoch.
func (g *Generator) Decode(id int64) (Parts, error) { return g.layout.Decode(g.epoch, id) }

// stepAsideFor is how long a caller that lost the state to another waits before it tries again.
const stepAsideFor = 3 * time.Microsecond

// stepAside waits stepAsideFor without touching the generator. A caller that lost the
// compare-and-swap lost it to one that now holds the state's cache line: taking the line back
// at once makes it move between cores on every ID, which on a two-vCPU VM costs more than
// issuing the ID. Stepping aside lets the winner issue a run of IDs with the line local, the
// way a mutex's sleeping waiter does, at the cost of stepAsideFor to the loser. It reads the
// system's monotonic clock even under an injected Clock: this is pacing, not ID time.
func stepAside() {
	until := time.Since(monoBase) + stepAsideFor
	for time.Since(monoBase) < until {
	}
}
