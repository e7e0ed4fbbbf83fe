package instrument

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// StoreFailurePolicy is what a governed component does when its store
// cannot be reached (a refused or reset connection, a timeout, a server that
// says it is not serving). Answers of a reachable store — a lock held by
// someone else, a fingerprint mismatch, an insufficient balance — never
// degrade, and neither does the caller's context ending.
type StoreFailurePolicy uint8

const (
	// FailClosed returns the store's error (the default): no decision is
	// taken without the store.
	FailClosed StoreFailurePolicy = iota
	// FailOpen decides without the store and counts every such decision in
	// lockgov_store_degraded_total{component}, logging them once a minute.
	// Govern falls back to a process-local lock per key; idempotency runs
	// fn without the check. It trades the cross-process guarantee for
	// availability: choose it only where a duplicate effect is caught
	// further down (a unique constraint, reconciliation).
	FailOpen
)

func (p StoreFailurePolicy) String() string {
	switch p {
	case FailClosed:
		return "fail_closed"
	case FailOpen:
		return "fail_open"
	}
	return fmt.Sprintf("StoreFailurePolicy(%d)", uint8(p))
}

// Valid reports whether p is FailClosed or FailOpen.
func (p StoreFailurePolicy) Valid() bool { return p <= FailOpen }

// WithStoreFailure sets what Acquire does when the governed Locker's store
// cannot be reached (default FailClosed: Acquire returns the transport
// error). With FailOpen, Acquire falls back to a process-local lock on the
// key, honouring the wait strategy: mutual exclusion then holds only
// between the goroutines of this process (see the package doc, "Store
// failure").
func WithStoreFailure(p StoreFailurePolicy) Option {
	return govOptionFunc(func(c *config) { c.storeFailure = p })
}

// localLocks is the fallback Locker of FailOpen: one in-process lock per
// key, built on FromFunc's lease (release once, ErrNotHeld on a second
// Release, release of a handle dropped while held). Its leases have Fence
// 0: no store issued one.
type localLocks struct {
	mu    sync.Mutex
	slots map[string]*localSlot
	gen   uint64 // the last occupy's number (under mu)
}

type localSlot struct {
	held chan struct{} // capacity 1: holding the element is holding the lock
	refs int           // goroutines holding or waiting, store leases occupying it
	// store, under mu, is the occupy of the store lease whose element is
	// in held (0: none; a process-local lease's, if any).
	store uint64
	// next, under mu, is the occupy of a store lease granted while a
	// process-local lease held the slot (the store never saw that one):
	// the process-local lease's release hands it the element instead of
	// freeing the slot (0: none).
	next uint64
}

func (l *localLocks) Acquire(ctx context.Context, key string, opts ...AcquireOption) (Lease, error) {
	cfg, err := ApplyAcquireOptions(opts...)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.slots == nil {
		l.slots = make(map[string]*localSlot)
	}
	s := l.slots[key]
	if s == nil {
		s = &localSlot{held: make(chan struct{}, 1)}
		l.slots[key] = s
	}
	s.refs++
	l.mu.Unlock()

	start := time.Now()
	if err := l.wait(ctx, s, cfg); err != nil {
		l.leave(key, s)
		return nil, fmt.Errorf("instrument: acquire %q (process-local fallback): %w", key, err)
	}
	var once sync.Once
	release := func(context.Context) error {
		once.Do(func() {
			l.mu.Lock()
			if s.next != 0 {
				// A store lease of this process granted beside this one
				// and still valid: from now on it holds the slot.
				s.store, s.next = s.next, 0
			} else {
				<-s.held
			}
			l.mu.Unlock()
			l.leave(key, s)
		})
		return nil
	}
	return newFuncLease(key, release, start, 0, cfg.Observer), nil
}

// wait takes s as the wait strategy says: one try, tries with backoff, or
// until ctx ends.
func (l *localLocks) wait(ctx context.Context, s *localSlot, cfg AcquireConfig) error {
	// Waiting on the process-local lock is waiting for another holder, as
	// on the store: lockgov_lock_waiters shows a pile-up in an outage too.
	waiting := false
	defer func() {
		if waiting {
			cfg.Observer.Waiting(false)
		}
	}()
	for attempt := 1; ; attempt++ {
		select {
		case s.held <- struct{}{}:
			cfg.Observer.Attempt(true)
			return nil
		default:
		}
		cfg.Observer.Attempt(false)
		var t *time.Timer
		var delay <-chan time.Time // nil until the deadline: only the lock or ctx ends the wait
		switch cfg.Wait {
		case WaitFailFast:
			return ErrNotAcquired
		case WaitRetry:
			if attempt >= cfg.MaxAttempts {
				return ErrNotAcquired
			}
			t = time.NewTimer(cfg.Backoff.Delay(attempt))
			delay = t.C
		}
		if !waiting {
			waiting = true
			cfg.Observer.Waiting(true)
		}
		select {
		case s.held <- struct{}{}:
			stop(t)
			cfg.Observer.Attempt(true)
			return nil
		case <-delay:
		case <-ctx.Done():
			stop(t)
			return fmt.Errorf("%w: %w", ErrNotAcquired, context.Cause(ctx))
		}
	}
}

// occupy takes key's slot for a lease the store granted, so that a
// fallback Acquire of the key waits for that lease as it waits for a
// process-local one: without it, a goroutine whose store lease is still
// valid when the store goes down shared the key with the next goroutine
// that fell back. A slot held by another store lease of this process is
// taken over: the store granted this one, so that one has ended (released
// or lost) and only its free has not run yet (its Release has not
// returned, or the AfterFunc of its Context is still to run); its free
// then leaves the slot held. A slot held by a process-local lease taken
// during an outage, which the store did not see when it granted this one,
// stays that lease's (the two overlap; see the package doc, "Store
// failure"), and this lease takes the slot over when that one is
// released: without that, the key's next fallback Acquire (the store
// down again) was granted beside this still valid store lease. It
// returns what frees the slot (once, however often it is called).
func (l *localLocks) occupy(key string) (free func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.slots == nil {
		l.slots = make(map[string]*localSlot)
	}
	s := l.slots[key]
	if s == nil {
		s = &localSlot{held: make(chan struct{}, 1)}
		l.slots[key] = s
	}
	l.gen++
	gen := l.gen
	select {
	case s.held <- struct{}{}:
		s.store = gen
	default:
		if s.store == 0 {
			// A process-local lease's: this one follows it (a store
			// lease named in next before has ended: the store granted
			// this one).
			s.next = gen
		} else {
			// Another store lease's: its element in held becomes this one's.
			s.store = gen
		}
	}
	s.refs++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			switch gen {
			case s.store:
				s.store = 0
				<-s.held
			case s.next:
				s.next = 0
			}
			l.mu.Unlock()
			l.leave(key, s)
		})
	}
}

func (l *localLocks) leave(key string, s *localSlot) {
	l.mu.Lock()
	s.refs--
	if s.refs == 0 {
		delete(l.slots, key)
	}
	l.mu.Unlock()
}

func stop(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}
