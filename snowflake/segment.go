package snowflake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrSegmentClosed is returned by Segment.Next after Close.
var ErrSegmentClosed = errors.New("snowflake: segment closed")

// Segment hands out IDs from a buffer that a background goroutine fills ahead of demand
// (the spec's segment pre-generation), so callers pay a buffer pop, not a clock read.
//
// The guarantees are the generator's: every ID is unique and a Segment hands them out in
// increasing order. IDs are pre-generated: an ID's time is when it was generated, up to two
// buffers ahead of demand, so under steady demand it is about one buffer's worth older than
// the moment it is handed out, and after a quiet spell as old as the spell. When the
// generator is bound to a lease, Next also refuses with ErrWorkerLeaseLost once the lease
// could have expired, even for buffered IDs, and after the lease is claimed again it drops
// the buffered IDs at or below the new claim's floor (the old claim's) unissued, so it never
// hands out an ID the generator itself would refuse. That check reads the monotonic clock on
// every call, so a lease-bound Segment's callers pay a clock read after all (not the
// generator's whole path).
//
// A Next that finds IDs buffered takes one under a mutex held for the pop alone. Only a Next
// that finds the buffer empty waits, for the filler's next buffer, and it does so holding
// refill, a lock it can abandon with its context: one caller at a time installs a buffer, so
// the IDs are handed out in the order they were generated.
type Segment struct {
	g      *Generator
	mu     sync.Mutex // guards cur and buf; held only to take an ID or install a buffer
	cur    []int64    // the IDs of buf not handed out yet
	buf    []int64    // the buffer being handed out, whole
	closed atomic.Bool
	refill chan struct{} // held by the caller waiting for the next buffer
	chunks chan chunk
	free   chan []int64 // used-up buffers, for the filler to fill again
	cancel context.CancelFunc
	done   chan struct{}
}

type chunk struct {
	ids []int64
	err error
}

// NewSegment starts filling buffers of size IDs from g. Close stops it.
func NewSegment(g *Generator, size int) (*Segment, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: segment size %d, want > 0", ErrInvalid, size)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Segment{
		g:      g,
		refill: make(chan struct{}, 1),
		chunks: make(chan chunk, 1),
		free:   make(chan []int64, 2), // at most three buffers exist: filling, queued, handed out
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go s.fill(ctx, size)
	return s, nil
}

func (s *Segment) fill(ctx context.Context, size int) {
	defer close(s.done)
	for ctx.Err() == nil {
		var ids []int64
		select {
		case ids = <-s.free:
		default:
			ids = make([]int64, size)
		}
		err := s.g.Fill(ctx, ids)
		if err != nil {
			s.recycle(ids)
			ids = nil
		}
		select {
		case s.chunks <- chunk{ids: ids, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil { // back off so a refusing generator is not spun on
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
	}
}

// Next returns the next buffered ID, waiting (honouring ctx) for the filler when the buffer
// is empty. A generator error (clock backwards, lease lost) is returned once per failed fill.
func (s *Segment) Next(ctx context.Context) (int64, error) {
	if s.closed.Load() {
		return 0, ErrSegmentClosed
	}
	floor := int64(-1) // IDs whose millisecond is at or below it are not handed out
	if s.g.lease != nil {
		f, _, err := s.g.checkLease(int64(time.Since(monoBase)))
		if err != nil {
			s.mu.Lock()
			s.cur = nil // buffered IDs are still unique, but the lease says stop
			s.mu.Unlock()
			return 0, err
		}
		// A lease that was lost and claimed again raises its floor above every ID of the
		// old claim, the buffers generated before the loss included: those are dropped
		// unissued, as the generator would not issue them now.
		floor = f
	}
	if id, ok := s.pop(floor); ok {
		return id, nil
	}
	select {
	case s.refill <- struct{}{}:
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	case <-s.done:
		return 0, ErrSegmentClosed
	}
	defer func() { <-s.refill }()
	// The caller that held refill before us may have installed a buffer.
	if id, ok := s.pop(floor); ok {
		return id, nil
	}
	for {
		select {
		case c := <-s.chunks:
			if c.err != nil {
				if s.closed.Load() { // the fill was cut short by Close
					return 0, ErrSegmentClosed
				}
				return 0, c.err
			}
			ids := above(c.ids, floor, s.g.timeShift)
			if len(ids) == 0 { // generated under a lease claim since lost
				s.recycle(c.ids)
				continue
			}
			s.mu.Lock()
			used := s.buf
			s.buf, s.cur = c.ids, ids[1:] // cur was empty: only a refill holder installs a buffer
			s.mu.Unlock()
			// Nothing reads the used buffer any more: every ID was copied out under mu.
			s.recycle(used)
			return ids[0], nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-s.done:
			return 0, ErrSegmentClosed
		}
	}
}

// above returns the IDs of ids (increasing) whose millisecond is above floor.
func above(ids []int64, floor int64, timeShift uint) []int64 {
	for len(ids) > 0 && ids[0]>>timeShift <= floor {
		ids = ids[1:]
	}
	return ids
}

// recycle hands a buffer nobody reads any more to the filler, or drops it.
func (s *Segment) recycle(buf []int64) {
	if buf == nil {
		return
	}
	select {
	case s.free <- buf:
	default:
	}
}

// pop takes the next buffered ID whose millisecond is above floor, if any, dropping those
// at or below it.
func (s *Segment) pop(floor int64) (int64, bool) {
	s.mu.Lock()
	if len(s.cur) > 0 && s.cur[0]>>s.g.timeShift <= floor {
		s.cur = above(s.cur, floor, s.g.timeShift)
	}
	if len(s.cur) == 0 {
		s.mu.Unlock()
		return 0, false
	}
	id := s.cur[0]
	s.cur = s.cur[1:]
	s.mu.Unlock()
	return id, true
}

// Close stops the filler and waits for it to exit. Buffered IDs are dropped unissued.
func (s *Segment) Close() error {
	s.closed.Store(true)
	s.cancel()
	<-s.done
	return nil
}
