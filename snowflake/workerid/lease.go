package workerid

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgov/lockgov/snowflake"
)

// Lease is a held WorkerID. It renews itself every TTL/3 with an owner-checked write and
// implements snowflake.WorkerLease, so a Generator bound to it (snowflake.WithLease) stops
// issuing before the lease could have expired and never issues at or below the slot's
// high-water mark. A lease whose slot vanished from the store (a Redis restart without
// persistence, say) is claimed again by the same owner, and the generator resumes; a slot
// taken by another owner ends the lease with ErrTakenOver.
type Lease struct {
	reg          *Registry
	claim        Claim
	token        string
	value        []byte
	key, hwKey   string
	floor        int64 // high-water mark found at claim, Unix ms
	etcdLease    int64 // etcd lease ID
	etcdRevision int64 // create revision of the etcd slot key

	state    atomic.Pointer[snowflake.LeaseState]
	expires  atomic.Int64 // unix ns: earliest the store may expire the slot
	lastUsed atomic.Pointer[func() time.Time]

	mu      sync.Mutex // serialises renewals with Release
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

// WorkerID returns the leased WorkerID.
func (l *Lease) WorkerID() int64 { return l.claim.WorkerID }

// Claim returns the metadata stored with the slot.
func (l *Lease) Claim() Claim { return l.claim }

// State returns the lease as a snowflake.Generator needs it.
func (l *Lease) State() snowflake.LeaseState { return *l.state.Load() }

// Err returns why the lease ended (ErrTakenOver, ErrReleased), or nil while it runs.
func (l *Lease) Err() error { return l.State().Err }

// Done is closed when the lease has ended for good: released or taken over.
func (l *Lease) Done() <-chan struct{} { return l.done }

// ExpiresAt is the earliest instant the store may expire the slot, from the last confirmed
// renewal: the generator stops a margin before it.
func (l *Lease) ExpiresAt() time.Time { return time.Unix(0, l.expires.Load()) }

// TrackLastUsed registers the generator's last-used time; Release persists it as the
// high-water mark, so a restarted process need not wait out the reservation.
func (l *Lease) TrackLastUsed(f func() time.Time) { l.lastUsed.Store(&f) }

// confirm records a successful claim or renewal sent at sent.
func (l *Lease) confirm(sent time.Time, ttl time.Duration, reserve int64) {
	cfg := l.reg.cfg
	ttl = min(ttl, cfg.ttl)
	l.expires.Store(sent.Add(ttl).UnixNano())
	l.state.Store(&snowflake.LeaseState{
		ValidUntil:     sent.Add(ttl - cfg.margin), // monotonic: sent came from time.Now
		FloorUnixMilli: l.floor,
		LimitUnixMilli: reserve,
	})
}

func (l *Lease) end(err error) {
	st := l.State()
	st.Err = err
	st.ValidUntil = time.Time{}
	l.state.Store(&st)
}

func (l *Lease) start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.keepalive(ctx)
}

func (l *Lease) keepalive(ctx context.Context) {
	defer close(l.done)
	cfg := l.reg.cfg
	interval, retry := cfg.ttl/3, max(cfg.ttl/20, 20*time.Millisecond)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next, err := l.renewOnce(ctx)
		if err != nil {
			l.end(err)
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
func (l *Lease) renewOnce(ctx context.Context) (ok bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false, nil
	}
	cfg := l.reg.cfg
	rctx, cancel := context.WithTimeout(ctx, cfg.renewTimeout)
	defer cancel()
	sent := time.Now()
	st, reserve, ttl, err := l.reg.b.renew(rctx, l)
	switch {
	case err != nil:
		return false, nil // the generator stops on its own at ValidUntil
	case st == renewed:
		l.confirm(sent, ttl, reserve)
		return true, nil
	case st == stolen:
		return false, fmt.Errorf("%w: worker id %d", ErrTakenOver, l.claim.WorkerID)
	}
	// The slot vanished: claim it again, above whatever high-water mark is there now.
	old := l.floor
	floor, reserve, err := l.reg.b.claim(rctx, l)
	switch {
	case errors.Is(err, ErrCollision):
		return false, fmt.Errorf("%w: worker id %d: %w", ErrTakenOver, l.claim.WorkerID, err)
	case err != nil:
		return false, nil
	}
	l.floor = max(old, floor)
	l.confirm(sent, cfg.ttl, reserve)
	return true, nil
}

// Release stops renewing, deletes the slot if this lease still holds it and persists the
// generator's last-used millisecond as the high-water mark. The lease's error becomes
// ErrReleased.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	already := l.stopped
	l.stopped = true
	l.mu.Unlock()
	if already {
		return nil
	}
	l.cancel()
	<-l.done
	if l.Err() == nil {
		l.end(ErrReleased)
	}
	var last int64
	if f := l.lastUsed.Load(); f != nil {
		if t := (*f)(); !t.IsZero() {
			last = t.UnixMilli()
		}
	}
	// An ID racing with Release was stamped no later than now: the generator checks the
	// lease after reading its clock, and the lease ended above.
	last = max(last, l.floor, l.reg.cfg.wall().UnixMilli())
	if err := l.reg.b.release(ctx, l, last); err != nil {
		return fmt.Errorf("workerid: release worker id %d (%s): %w", l.claim.WorkerID, l.reg.b.name(), err)
	}
	return nil
}
