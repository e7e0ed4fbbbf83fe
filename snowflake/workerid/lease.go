package workerid

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/snowflake"
)

// Lease is a held WorkerID. It renews itself every TTL/3 with an owner-checked write and
// implements snowflake.WorkerLease, so a Generator bound to it (snowflake.WithLease) stops
// issuing before the lease could have expired and never issues at or below the slot's
// high-water mark. A lease whose slot vanished from the store (a Redis restart without
// persistence, say) is claimed again by the same owner, and the generator resumes once its
// clock has passed the new floor; a slot taken by another owner ends the lease with
// ErrTakenOver. A Lease garbage-collected while held is released (see WithLeakedHook).
type Lease struct {
	s        *leaseState
	lastUsed atomic.Pointer[func() time.Time]
}

// leaseState is everything the renewal goroutine touches. It never points back at its
// Lease, so a Lease dropped without Release (and the generator bound to it, which the
// lease's last-used func references) becomes unreachable, and its cleanup releases the
// slot instead of the renewals holding it forever.
type leaseState struct {
	reg          *Registry
	claim        Claim
	claimed      time.Time // monotonic, for logs
	token        string
	value        []byte
	key, hwKey   string
	spaceKey     string
	floor        int64 // high-water mark found at claim, Unix ms
	etcdLease    int64 // etcd lease ID
	etcdRevision int64 // create revision of the etcd slot key
	hwMark       int64 // etcd: the high-water mark as last read or written
	hwRevision   int64 // etcd: its mod revision then (0: the key did not exist)

	beat    atomic.Pointer[fleet.Attachment] // the process's heartbeat on the store, or nil
	state   atomic.Pointer[snowflake.LeaseState]
	expires atomic.Int64 // unix ns: earliest the store may expire the slot

	mu      sync.Mutex // serialises renewals with Release
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

// WorkerID returns the leased WorkerID.
func (l *Lease) WorkerID() int64 { return l.s.claim.WorkerID }

// Claim returns the metadata stored with the slot.
func (l *Lease) Claim() Claim { return l.s.claim }

// Layout returns the layout of the Registry's ID space (WithLayout, default
// snowflake.DefaultLayout); ok is always true. snowflake.New refuses to bind a generator of
// another layout.
func (l *Lease) Layout() (layout snowflake.Layout, ok bool) { return l.s.reg.cfg.layout, true }

// Epoch returns the epoch of the Registry's ID space (WithEpoch, default
// snowflake.DefaultEpoch); ok is always true. snowflake.New refuses to bind a generator of
// another epoch.
func (l *Lease) Epoch() (epoch time.Time, ok bool) { return l.s.reg.cfg.epoch, true }

// State returns the lease as a snowflake.Generator needs it.
func (l *Lease) State() snowflake.LeaseState { return l.s.State() }

// Err returns why the lease ended (ErrTakenOver, ErrReleased), or nil while it runs.
func (l *Lease) Err() error { return l.s.State().Err }

// Done is closed when the lease has ended for good: released or taken over.
func (l *Lease) Done() <-chan struct{} { return l.s.done }

// ExpiresAt is the earliest instant the store may expire the slot, from the last confirmed
// renewal: the generator stops a margin before it.
func (l *Lease) ExpiresAt() time.Time { return time.Unix(0, l.s.expires.Load()) }

// TrackLastUsed registers the generator's last-used time; Release persists it as the
// high-water mark, so a restarted process need not wait out the reservation. It replaces a
// func registered before; snowflake.New uses BindGenerator instead.
func (l *Lease) TrackLastUsed(f func() time.Time) { l.lastUsed.Store(&f) }

// BindGenerator registers the last-used time of the generator bound to the lease, as
// TrackLastUsed does, unless a generator is already bound: then it registers nothing and
// returns false. snowflake.New calls it, and refuses a second generator on one lease: the
// two would share the WorkerID and the floor but not their state, and issue the same IDs.
func (l *Lease) BindGenerator(f func() time.Time) bool { return l.lastUsed.CompareAndSwap(nil, &f) }

func (s *leaseState) State() snowflake.LeaseState { return *s.state.Load() }

// confirm records a successful claim or renewal sent at sent.
func (s *leaseState) confirm(sent time.Time, ttl time.Duration, reserve int64) {
	cfg := s.reg.cfg
	ttl = min(ttl, cfg.ttl)
	s.expires.Store(sent.Add(ttl).UnixNano())
	s.state.Store(&snowflake.LeaseState{
		ValidUntil:     sent.Add(ttl - cfg.margin), // monotonic: sent came from time.Now
		FloorUnixMilli: s.floor,
		LimitUnixMilli: reserve,
	})
}

func (s *leaseState) end(err error) {
	st := s.State()
	st.Err = err
	st.ValidUntil = time.Time{}
	s.state.Store(&st)
}

// start begins renewing and returns the caller's handle, with the cleanup that releases
// the slot if the handle is dropped while held.
func (s *leaseState) start() *Lease {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.keepalive(ctx)
	l := &Lease{s: s}
	runtime.AddCleanup(l, (*leaseState).leaked, s)
	return l
}

func (s *leaseState) keepalive(ctx context.Context) {
	defer close(s.done)
	cfg := s.reg.cfg
	interval, retry := cfg.ttl/3, max(cfg.ttl/20, 20*time.Millisecond)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next, err := s.renewOnce(ctx)
		if err != nil {
			s.end(err)
			return
		}
		if next {
			t.Reset(interval)
		} else {
			t.Reset(retry)
		}
	}
}

// renewOnce renews (or re-claims a vanished slot). ok is false after a transient failure;
// err is non-nil when the lease has ended for good.
func (s *leaseState) renewOnce(ctx context.Context) (ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false, nil
	}
	cfg := s.reg.cfg
	rctx, cancel := context.WithTimeout(ctx, cfg.renewTimeout)
	defer cancel()
	sent := time.Now()
	st, reserve, floor, ttl, err := s.reg.b.renew(rctx, s)
	switch {
	case err != nil:
		return false, nil // the generator stops on its own at ValidUntil
	case st == renewed:
		// The slot's recorded floor is above s.floor only after a re-claim whose reply
		// was lost (see renew.lua): the floor that re-claim found must be waited for.
		s.floor = max(s.floor, floor)
		s.confirm(sent, ttl, reserve)
		return true, nil
	case st == stolen:
		return false, fmt.Errorf("%w: worker id %d", ErrTakenOver, s.claim.WorkerID)
	}
	// The slot vanished: claim it again, above whatever high-water mark is there now (on
	// Redis, one TTL ahead when the mark vanished with it).
	old := s.floor
	floor, reserve, _, err = s.reg.claim(rctx, s, true)
	switch {
	case errors.Is(err, ErrCollision), errors.Is(err, ErrSpaceMismatch):
		// Another owner took the slot meanwhile, or one of another ID space did and left
		// its space (it issued IDs this lease's generator must not issue again).
		return false, fmt.Errorf("%w: worker id %d: %w", ErrTakenOver, s.claim.WorkerID, err)
	case err != nil:
		return false, nil
	}
	s.floor = max(old, floor)
	s.confirm(sent, cfg.ttl, reserve)
	return true, nil
}

// stop ends renewing and waits for the renewal goroutine. It reports false if the lease
// was already stopped.
func (s *leaseState) stop() bool {
	s.mu.Lock()
	already := s.stopped
	s.stopped = true
	s.mu.Unlock()
	if already {
		return false
	}
	s.cancel()
	<-s.done
	s.detachFleet()
	if s.State().Err == nil {
		s.end(ErrReleased)
	}
	return true
}

// release deletes the slot if s still holds it, and lowers the high-water mark to
// lastUsed (Unix ms) when that is known (non-zero); otherwise the reservation stays.
func (s *leaseState) release(ctx context.Context, lastUsed int64) error {
	if err := s.reg.b.release(ctx, s, lastUsed); err != nil {
		return fmt.Errorf("workerid: release worker id %d (%s): %w", s.claim.WorkerID, s.reg.b.name(), err)
	}
	return nil
}

// Release stops renewing, deletes the slot if this lease still holds it and persists the
// generator's last-used millisecond as the high-water mark. The lease's error becomes
// ErrReleased.
func (l *Lease) Release(ctx context.Context) error {
	if !l.s.stop() {
		return nil
	}
	var last int64
	if f := l.lastUsed.Load(); f != nil {
		if t := (*f)(); !t.IsZero() {
			last = t.UnixMilli()
		}
	}
	// An ID racing with Release was stamped no later than now: the generator checks the
	// lease after reading its clock, and the lease ended above.
	last = max(last, l.s.floor, l.s.reg.cfg.wall().UnixMilli())
	return l.s.release(ctx, last)
}

// leaked runs when the caller dropped a held Lease without Release: it is counted, logged
// and released. The generator's last-used time went with the Lease, so the reservation
// stays as the high-water mark (the generator never issued past it).
func (s *leaseState) leaked() {
	s.mu.Lock()
	skip := s.stopped
	s.mu.Unlock()
	if skip || s.State().Err != nil { // released, or taken over: nothing renews or is held
		return
	}
	cfg := s.reg.cfg
	if cfg.onLeaked != nil {
		cfg.onLeaked(s.claim)
	}
	cfg.logger.Error("workerid: lease garbage-collected while held; releasing it (call Lease.Release)",
		"service", s.claim.Service, "worker_id", s.claim.WorkerID, "backend", s.reg.b.name(), "held_for", time.Since(s.claimed))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ttl)
		defer cancel()
		if !s.stop() {
			return
		}
		if err := s.release(ctx, 0); err != nil {
			cfg.logger.Warn("workerid: releasing a garbage-collected lease failed; its slot expires after the TTL",
				"worker_id", s.claim.WorkerID, "error", err)
		}
	}()
}
