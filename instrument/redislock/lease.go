package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/leasecore"
)

// lease is the handle a caller holds. Its lifecycle (the expiry timer, the
// watchdog, max hold, ending once with a cause, the release of a handle the
// garbage collector found still held) is leasecore's; what runs on its own
// references only the core and the store, never the handle, so a handle the
// caller dropped without Release becomes unreachable.
type lease struct {
	*leasecore.Lease // Context, Refresh, Release
	key              string
	fence            uint64
}

func (h *lease) Key() string   { return h.key }
func (h *lease) Fence() uint64 { return h.fence }

// newLease starts the lifecycle of a lease r acquired with fence, by an
// attempt sent at sent. leaveQueue hands the local turn to the next waiter
// when the lease ends (nil: no turn was taken).
func newLease(s store, key string, r *request, fence uint64, sent time.Time, cfg *instrument.AcquireConfig, leaveQueue func()) *lease {
	h := &lease{key: key, fence: fence}
	r.st = s
	h.Lease = leasecore.New(leasecore.Config{
		Name:     "redislock",
		Key:      key,
		TTL:      r.ttl,
		Drift:    s.drift(r.ttl),
		Start:    sent,
		MaxHold:  cfg.MaxHold,
		Watchdog: !cfg.NoWatchdog,
		Events:   cfg.Observer,
		Store:    r,
		OnEnd:    leaveQueue,
	})
	r.core = h.Lease
	leasecore.Track(h, h.Lease)
	return h
}

// Renew is the lease's owner-checked extension (leasecore.Store).
func (r *request) Renew(ctx context.Context) (time.Duration, error) {
	ok, err := r.st.refresh(ctx, r.keys, r.tok, r.ttl)
	if err == nil && !ok {
		err = instrument.ErrNotHeld
	}
	return r.ttl, err
}

// Release is the lease's owner-checked release (leasecore.Store).
//
// A release whose outcome is unknown (its reply lost, every resend failed,
// or the caller's context ended, before or while it was sent: go-redis
// sends nothing on an ended context) may have left the lock standing under
// this token, with the watchdog stopped and nobody to release it before
// its TTL runs out: under `defer lease.Release(reqCtx)` after the request
// was cancelled, every such lock. It is then given back in the background,
// as an Acquire that gave up is (Locker.leave: leave.lua, owner-checked,
// hands the lock to the next waiter or deletes it; bounded, retried until
// Redis answers or the lock's TTL has passed). The caller still gets the
// error: whether the lock was free in time is unknown. After Close the
// give-back runs in the caller, within ctx, or not at all once ctx has
// ended (Locker.leaveClosed); what it did not give back is left to its TTL
// and the error says so, wrapping ErrClosed.
//
// In quorum mode, on the nodes whose release may not have run
// (quorum.release marks them), when they are enough to keep a majority
// from everyone else (mayHold): also after a Release that returned nil
// because one node confirmed it. A minority of nodes that could not be
// reached is left to expire the grant at its TTL, as a quorum lock
// tolerates a minority of nodes down (giving back there would send a
// background try to a dead node after every Release); for the same reason
// the give-back ends once the nodes it has not reached are a minority
// (quorum.leave).
//
// While the lock's slot is being moved to another Cluster primary, Redis
// refuses release.lua (resharding): its tombstone key does not exist
// yet, so its keys are never all on one node. The release is tried again,
// with back-off, until Redis runs it, ctx ends or the next try would go
// past the lease's local deadline (past it the lock may have expired, and
// a release that then found it gone would report it lost although it was
// held until this call). Giving up at once would end
// the lease as lost though it was still held, and free it only through
// the give-back, after the migration anyway.
func (r *request) Release(ctx context.Context) error {
	sent := time.Now()
	ok, err := r.st.release(ctx, r)
	if _, isQuorum := r.st.(*quorum); !isQuorum && r.owner != nil && r.owner.movesSlot(err) {
		var until time.Time
		if r.core != nil {
			until = r.core.Deadline()
		}
		// A try of the first call may have run, its reply lost, before
		// go-redis's resend was refused: its tombstone tells a later try
		// that the lock was released, but only for as long as it lives
		// (the first call's tombstoneTTL, less the second it allows for a
		// resend in flight). A try sent after that which finds the lock
		// gone cannot tell that release from a loss.
		tombGone := sent.Add(time.Duration(r.tombTTLMs)*time.Millisecond - time.Second)
		for n := 1; r.owner.movesSlot(err) && time.Now().Add(reshardPause(n)).Before(until) && sleepCtx(ctx, reshardPause(n)); n++ {
			late := !time.Now().Before(tombGone)
			if ok, err = r.st.release(ctx, r); late && !ok && err == nil {
				err = errors.New("the lock is gone after its slot moved, for longer than an earlier try's tombstone lives: whether that try, its reply lost, released it is unknown")
			}
		}
	}
	var left error // after Close: what the give-back could not do
	if r.owner != nil && r.mayHold(ok, err) {
		r.releasing = true
		left = r.owner.leave(ctx, r)
	}
	switch {
	case ok:
		// A node confirmed it (quorum mode): the release is done, whatever
		// the give-back on the others could do.
		return nil
	case err != nil && left != nil:
		return fmt.Errorf("%w; %w", err, left)
	case err != nil:
		return err // the outcome is unknown
	}
	return instrument.ErrNotHeld
}

// mayHold reports whether, after a release that returned ok and err, the
// store may still hold the lock under this token where it keeps others
// from it, so that it is worth giving back. On one node: the release's
// outcome is unknown. In quorum mode: the nodes quorum.release marked as
// not having answered are enough to keep every other token from a
// majority (quorum.blocks), whatever the other nodes said. A Release that
// one node confirmed while two of three were cut off returns nil, but
// those two still hold the grant; a minority marked (a node down for good)
// cannot keep anyone from the lock, and is left to its TTL.
//
// In quorum mode the marks alone say it: quorum.release judged each node's
// error by itself. err joins them, and one node's closed client in the
// join (errors.Is finds it) would speak for the nodes whose reply was
// lost.
func (r *request) mayHold(ok bool, err error) bool {
	if q, isQuorum := r.st.(*quorum); isQuorum {
		return r.nodes != nil && q.blocks(r)
	}
	return !ok && unanswered(err)
}
