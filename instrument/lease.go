package instrument

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// governedLease wraps a backend lease: it counts re-entrant holds, emits the
// "release lock" span and carries itself in its Context for re-entry.
type governedLease struct {
	inner Lease
	g     *Governed
	obs   *leaseObserver
	label string
	ctx   context.Context
	self  heldNode // the node ctx carries; part of the lease to save an allocation

	mu       sync.Mutex
	holds    int  // this handle plus live re-entrant handles
	released bool // this handle's own Release was called
}

func (l *governedLease) Key() string              { return l.inner.Key() }
func (l *governedLease) Fence() uint64            { return l.inner.Fence() }
func (l *governedLease) Context() context.Context { return l.ctx }

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

// reenter adds a hold, or returns nil when the lease is over.
func (l *governedLease) reenter() Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holds == 0 || l.inner.Context().Err() != nil {
		return nil
	}
	l.holds++
	return &reentrantLease{root: l}
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
	ctx, span := l.g.tracer.Start(ctx, "release lock", spanKindClient)
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
		span.RecordError(err)
		span.SetStatus(codes.Error, "release failed")
	}
	return err
}

// reentrantLease is the handle of a nested Acquire on a key the context
// already holds. It shares the root's lock, fence and context.
type reentrantLease struct {
	root *governedLease
	once sync.Once
}

func (r *reentrantLease) Key() string                       { return r.root.Key() }
func (r *reentrantLease) Fence() uint64                     { return r.root.Fence() }
func (r *reentrantLease) Context() context.Context          { return r.root.Context() }
func (r *reentrantLease) Refresh(ctx context.Context) error { return r.root.Refresh(ctx) }

func (r *reentrantLease) Release(ctx context.Context) error {
	err := fmt.Errorf("instrument: release (pattern %s): %w: already released", r.root.label, ErrNotHeld)
	r.once.Do(func() { err = r.root.drop(ctx) })
	return err
}

// heldKey is the context key of the chain of leases a context holds.
type heldKey struct{}

type heldNode struct {
	owner *Governed
	key   string
	lease *governedLease
	next  *heldNode
}

func heldChain(ctx context.Context) *heldNode {
	n, _ := ctx.Value(heldKey{}).(*heldNode)
	return n
}

// heldLease finds a live lease of owner on key in ctx.
func heldLease(ctx context.Context, owner *Governed, key string) *governedLease {
	for n := heldChain(ctx); n != nil; n = n.next {
		if n.owner == owner && n.key == key {
			return n.lease
		}
	}
	return nil
}

// ContextWithLease returns a copy of ctx that carries lease, so that an
// Acquire of the same key through the same governed Locker with the returned
// context re-enters instead of waiting for itself. Leases that Govern did
// not produce are carried for nothing.
func ContextWithLease(ctx context.Context, lease Lease) context.Context {
	var gl *governedLease
	switch l := lease.(type) {
	case *governedLease:
		gl = l
	case *reentrantLease:
		gl = l.root
	default:
		return ctx
	}
	return context.WithValue(ctx, heldKey{}, &heldNode{owner: gl.g, key: gl.Key(), lease: gl, next: heldChain(ctx)})
}
