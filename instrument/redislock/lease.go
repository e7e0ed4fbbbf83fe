package redislock

import (
	"context"
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
func (r *request) Release(ctx context.Context) error {
	ok, err := r.st.release(ctx, r)
	switch {
	case ok:
		return nil
	case err != nil:
		return err // the outcome is unknown
	}
	return instrument.ErrNotHeld
}
