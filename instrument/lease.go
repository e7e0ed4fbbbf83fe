package instrument

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockgov/lockgov/internal/telemetry"
)

// governedLease wraps a backend lease: it counts re-entrant holds, emits the
// "release lock" span and carries itself in its Context for re-entry.
type governedLease struct {
	inner Lease
	g     *Governed
	obs   *leaseObserver
	label string
	ctx   leaseContext
	self  heldNode // the node ctx carries; part of the lease to save an allocation
	top   hold     // the level the root handle holds; re-entrant holds open below it

	mu       sync.Mutex
	holds    int32 // this handle plus live re-entrant handles
	released bool  // this handle's own Release was called

	// unslot, under FailOpen, frees the key's process-local slot that this
	// store lease occupies (localLocks.occupy); nil otherwise. (holds is
	// an int32 beside released so that this field keeps governedLease in
	// its 176-byte size class: 16 B fewer on every Acquire.)
	unslot func()
}

func (l *governedLease) Key() string              { return l.inner.Key() }
func (l *governedLease) Fence() uint64            { return l.inner.Fence() }
func (l *governedLease) Context() context.Context { return &l.ctx }

func (l *governedLease) Refresh(ctx context.Context) error { return l.inner.Refresh(ctx) }

// Release counts this handle's hold down and releases the lock when no
// re-entrant hold is left.
func (l *governedLease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("instrument: release (pattern %s): %w: already released", l.label, ErrNotHeld)
	}
	l.released = true
	l.mu.Unlock()
	return l.drop(ctx)
}

// reenter opens a re-entrant hold directly below at, waiting (unless
// failFast) while another re-entrant hold is open there. It returns nil and
// no error when the lease is over, so that the caller acquires anew.
func (l *governedLease) reenter(ctx context.Context, at *hold, failFast bool) (Lease, error) {
	h, err := at.enter(ctx, l.inner.Context(), failFast)
	if err != nil {
		return nil, fmt.Errorf("instrument: acquire (pattern %s): re-entry: %w", l.label, err)
	}
	if h == nil {
		return nil, nil
	}
	l.mu.Lock()
	if l.holds == 0 || l.inner.Context().Err() != nil {
		l.mu.Unlock()
		h.parent.leave()
		return nil, nil
	}
	l.holds++
	l.mu.Unlock()
	r := &reentrantLease{root: l, h: h}
	r.self = heldNode{owner: l.g, key: l.Key(), lease: l, at: h, next: heldChain(ctx)}
	r.ctx = leaseContext{inner: l.inner, node: &r.self}
	return r, nil
}

// drop removes one hold and releases the backend lease with the last one.
func (l *governedLease) drop(ctx context.Context) error {
	l.mu.Lock()
	l.holds--
	last := l.holds == 0
	l.mu.Unlock()
	if !last {
		return nil
	}
	if l.unslot != nil {
		// Once the release has run: a fallback Acquire of the key must not
		// get it while the store may still hold it for this lease.
		defer l.unslot()
	}
	if l.g.spansOff(ctx) {
		err := l.inner.Release(ctx)
		l.obs.end()
		return err
	}
	ctx, span := l.g.tracer.Start(ctx, "release lock", clientSpan...)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("lock.key_pattern", l.label),
			attribute.String("lock.backend", l.g.backend),
			attribute.Int64("lock.fence", int64(l.inner.Fence())),
			attribute.String("db.system.name", l.g.backend),
		)
	}
	defer span.End()
	err := l.inner.Release(ctx)
	l.obs.end()
	if err != nil {
		span.RecordError(telemetry.Keyless(err, l.inner.Key()))
		span.SetStatus(codes.Error, "release failed")
	}
	return err
}

// reentrantLease is the handle of a nested Acquire on a key the context
// already holds. It shares the root's lock, fence and lifetime; its Context
// carries its own hold, so an Acquire with that context re-enters below it.
type reentrantLease struct {
	root *governedLease
	h    *hold
	ctx  leaseContext
	self heldNode
	once sync.Once
}

func (r *reentrantLease) Key() string                       { return r.root.Key() }
func (r *reentrantLease) Fence() uint64                     { return r.root.Fence() }
func (r *reentrantLease) Context() context.Context          { return &r.ctx }
func (r *reentrantLease) Refresh(ctx context.Context) error { return r.root.Refresh(ctx) }

func (r *reentrantLease) Release(ctx context.Context) error {
	err := fmt.Errorf("instrument: release (pattern %s): %w: already released", r.root.label, ErrNotHeld)
	r.once.Do(func() {
		err = r.root.drop(ctx)
		r.h.release()
	})
	return err
}

// hold is one level of a held lease: the root handle's, or a re-entrant
// handle's. At most one re-entrant hold is open directly below a hold; an
// Acquire that re-enters there while one is open waits for it, so that
// goroutines sharing a context that carries the lease exclude each other
// as they would without it. A hold released while a hold below it is still
// open keeps its own place until that one is released too.
type hold struct {
	parent *hold // nil for the root

	mu    sync.Mutex
	child bool          // a re-entrant hold directly below is open
	done  bool          // released (re-entrant holds only)
	free  chan struct{} // closed when child becomes false; made by the first waiter
}

func newHold(parent *hold) *hold {
	return &hold{parent: parent}
}

// enter opens a hold below h (below the nearest unreleased hold above it,
// when h was released), waiting while another is open there. It returns nil
// and no error when lease ended meanwhile.
func (h *hold) enter(ctx context.Context, lease context.Context, failFast bool) (*hold, error) {
	for {
		h.mu.Lock()
		if h.done {
			// The context's holder has released its hold: it holds nothing
			// any more and contends where that hold was opened.
			h.mu.Unlock()
			h = h.parent
			continue
		}
		if !h.child {
			h.child = true
			h.mu.Unlock()
			return newHold(h), nil
		}
		if h.free == nil {
			h.free = make(chan struct{})
		}
		free := h.free
		h.mu.Unlock()
		if failFast {
			return nil, fmt.Errorf("%w: another goroutine holds it through the same context", ErrNotAcquired)
		}
		select {
		case <-free:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting for another goroutine that holds it through the same context: %w", ErrNotAcquired, context.Cause(ctx))
		case <-lease.Done():
			return nil, nil
		}
	}
}

// release marks a re-entrant hold released and gives its place back, once
// no hold below it is open.
func (h *hold) release() {
	h.mu.Lock()
	h.done = true
	busy := h.child
	h.mu.Unlock()
	if !busy {
		h.parent.leave()
	}
}

// leave records that the hold open directly below h has ended.
func (h *hold) leave() {
	h.mu.Lock()
	h.child = false
	if h.free != nil {
		close(h.free)
		h.free = nil
	}
	up := h.done && h.parent != nil
	h.mu.Unlock()
	if up {
		h.parent.leave()
	}
}

// heldKey is the context key of the chain of leases a context holds.
type heldKey struct{}

// leaseContext is a lease handle's Context: the backend lease's context
// carrying the handle's place in the chain under heldKey. It is
// context.WithValue without the allocation, as it lives in the handle, and
// it asks the backend lease for its context only when used (a backend may
// make it on demand: most leases are released without it).
type leaseContext struct {
	inner Lease
	node  *heldNode
}

func (c *leaseContext) Deadline() (time.Time, bool) { return c.inner.Context().Deadline() }
func (c *leaseContext) Done() <-chan struct{}       { return c.inner.Context().Done() }
func (c *leaseContext) Err() error                  { return c.inner.Context().Err() }

func (c *leaseContext) Value(key any) any {
	if key == (heldKey{}) {
		return c.node
	}
	return c.inner.Context().Value(key)
}

type heldNode struct {
	owner *Governed
	key   string
	lease *governedLease
	at    *hold // the hold this context's holder has; re-entry opens below it
	next  *heldNode
}

func heldChain(ctx context.Context) *heldNode {
	n, _ := ctx.Value(heldKey{}).(*heldNode)
	return n
}

// heldBy finds the innermost hold of owner on key that ctx carries.
func heldBy(ctx context.Context, owner *Governed, key string) *heldNode {
	for n := heldChain(ctx); n != nil; n = n.next {
		if n.owner == owner && n.key == key {
			return n
		}
	}
	return nil
}

// ContextWithLease returns a copy of ctx that carries lease, so that an
// Acquire of the same key through the same governed Locker with the returned
// context re-enters instead of waiting for itself (see the package doc on
// re-entrancy). Leases that Govern did not produce are carried for nothing.
func ContextWithLease(ctx context.Context, lease Lease) context.Context {
	var n *heldNode
	switch l := lease.(type) {
	case *governedLease:
		n = &heldNode{owner: l.g, key: l.Key(), lease: l, at: &l.top}
	case *reentrantLease:
		n = &heldNode{owner: l.root.g, key: l.Key(), lease: l.root, at: l.h}
	default:
		return ctx
	}
	n.next = heldChain(ctx)
	return context.WithValue(ctx, heldKey{}, n)
}
