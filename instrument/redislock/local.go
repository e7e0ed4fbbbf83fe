package redislock

import (
	"context"
	"sync"
)

// localQueue lets only one waiting goroutine per key and Locker contend in
// Redis at a time; the others queue in-process and are handed the turn
// without a round trip. Without it, every release wakes every local waiter,
// each runs the acquire script, and all but one fail: a herd that costs one
// script per waiter per handoff.
// Fair mode does not use it (fairNode.takesTurns): its order is Redis's.
type localQueue struct {
	mu    sync.Mutex
	slots map[string]*slot
	// closed is closed by Close, which ends a wait behind a holder of the
	// same Locker as it ends one for a release notification.
	closed <-chan struct{}
}

type slot struct {
	turn chan struct{} // capacity 1: holding the element is holding the turn
	refs int
}

// enter waits for key's turn, or for ctx to end, or for the Locker to
// close (ErrClosed).
// onWait runs when the turn is not free at once.
func (q *localQueue) enter(ctx context.Context, key string, onWait func()) (release func(), err error) {
	q.mu.Lock()
	if q.slots == nil {
		q.slots = make(map[string]*slot)
	}
	s := q.slots[key]
	if s == nil {
		s = &slot{turn: make(chan struct{}, 1)}
		q.slots[key] = s
	}
	s.refs++
	q.mu.Unlock()

	select {
	case s.turn <- struct{}{}:
	default:
		onWait()
		select {
		case s.turn <- struct{}{}:
		case <-ctx.Done():
			q.leave(key, s)
			return nil, context.Cause(ctx)
		case <-q.closed:
			q.leave(key, s)
			return nil, ErrClosed
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-s.turn
			q.leave(key, s)
		})
	}, nil
}

func (q *localQueue) leave(key string, s *slot) {
	q.mu.Lock()
	s.refs--
	if s.refs == 0 {
		delete(q.slots, key)
	}
	q.mu.Unlock()
}
