package instrument

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/lockgov/lockgov/instrument/fleet"
)

// FleetStorer is implemented by Lockers that know the store their locks
// live in (redislock.Locker, etcdlock.Locker): Govern publishes the
// process's heartbeat there. A nil store publishes none.
type FleetStorer interface {
	FleetStore() fleet.Store
}

// WithoutHeartbeat publishes no heartbeat for this governed Locker. Its
// locks are then invisible in the fleet view (the agent still never calls a
// lock held by a live process a finding) and, unless WithSkewSource is
// given, no skew tier is applied.
func WithoutHeartbeat() Option {
	return govOptionFunc(func(c *config) { c.noBeat = true })
}

// WithHeartbeat configures the process's heartbeat on the Locker's store:
// instance and service name, interval, an injected clock (fleet.WithClock).
// The heartbeat is shared by every governed Locker and WorkerID lease of
// the process on one store; the options of the one that starts it apply.
func WithHeartbeat(opts ...fleet.Option) Option {
	return govOptionFunc(func(c *config) { c.beatOpts = append(c.beatOpts, opts...) })
}

// attachFleet joins the process's heartbeat on l's store. The heartbeat's
// measured clock offset becomes the skew source unless WithSkewSource set
// one. The share ends with Close, or when g is garbage-collected.
func (g *Governed) attachFleet(l Locker) error {
	fs, ok := l.(FleetStorer)
	if g.cfg.noBeat || !ok {
		return nil
	}
	s := fs.FleetStore()
	if s == nil {
		return nil
	}
	opts := append([]fleet.Option{
		fleet.WithSkewTiers(g.cfg.policy.Skew),
		fleet.WithLogger(g.cfg.logger),
		fleet.WithRegisterer(g.cfg.reg),
	}, g.cfg.beatOpts...)
	a, err := fleet.Attach(s, opts...)
	if err != nil {
		return fmt.Errorf("%w: instrument.Govern: heartbeat: %w", ErrInvalidOption, err)
	}
	g.beat = a
	if g.cfg.skew == nil {
		g.cfg.skew = a.Skew
	}
	// Close deletes the heartbeat when it is the last share: not on the
	// runtime's cleanup goroutine, which runs every cleanup of the process.
	runtime.AddCleanup(g, func(a *fleet.Attachment) { go func() { _ = a.Close() }() }, a)
	return nil
}

// Close ends this governed Locker's share of the process's heartbeat; the
// last share on a store deletes the heartbeat. Leases stay as they are and
// Acquire keeps working, without a heartbeat. Closing twice does nothing.
func (g *Governed) Close() error {
	if g.beat == nil {
		return nil
	}
	return g.beat.Close()
}

// trackHeld lists a new lease in the heartbeat; the observer's end removes it.
func (g *Governed) trackHeld(o *leaseObserver, fence uint64) {
	if g.beat == nil {
		return
	}
	g.beat.TrackHeld(o, fleet.HeldLock{
		Key: o.key, Pattern: o.pm.pattern, Backend: g.backend, Fence: fence, Since: o.acquiredAt.UTC(), Fallback: o.fallback,
	})
}

func (g *Governed) untrackHeld(o *leaseObserver) {
	if g.beat != nil {
		g.beat.UntrackHeld(o)
	}
}

// beforeWait records which keys the acquiring context already holds, so
// that a wait is published with them: the edges of the wait-for graph.
func (g *Governed) beforeWait(ctx context.Context, o *leaseObserver) {
	if g.beat == nil {
		return
	}
	for n := heldChain(ctx); n != nil; n = n.next {
		o.holds = append(o.holds, n.key)
	}
}

func (g *Governed) trackWaiting(o *leaseObserver, waiting bool) {
	if g.beat == nil {
		return
	}
	if !waiting {
		g.beat.UntrackWaiting(o)
		return
	}
	g.beat.TrackWaiting(o, fleet.WaitingLock{
		Key: o.key, Pattern: o.pm.pattern, Backend: g.backend, Since: time.Now().UTC(), HoldsWhileWaiting: o.holds,
		Fallback: o.fallback,
	})
}
