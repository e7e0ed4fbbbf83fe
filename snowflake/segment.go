package snowflake

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrSegmentClosed is returned by Segment.Next after Close.
var ErrSegmentClosed = errors.New("snowflake: segment closed")

// Segment hands out IDs from a buffer that a background goroutine fills ahead of demand
// (the spec's segment pre-generation), so callers pay a buffer pop, not a clock read.
//
// The guarantees are the generator's: every ID is unique and a Segment hands them out in
// increasing order. IDs are pre-generated, so an ID's time can be up to one buffer's worth
// older than the moment it is handed out. When the generator is bound to a lease, Next also
// refuses with ErrWorkerLeaseLost once the lease could have expired, even for buffered IDs.
type Segment struct {
	g      *Generator
	sem    chan struct{} // a lock that waiters can abandon with their context
	chunks chan chunk
	cur    []int64
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
		sem:    make(chan struct{}, 1),
		chunks: make(chan chunk, 1),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go s.fill(ctx, size)
	return s, nil
}

func (s *Segment) fill(ctx context.Context, size int) {
	defer close(s.done)
	for ctx.Err() == nil {
		ids := make([]int64, size)
		err := s.g.Fill(ctx, ids)
		if err != nil {
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
	select {
	case <-s.done:
		return 0, ErrSegmentClosed
	default:
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	case <-s.done:
		return 0, ErrSegmentClosed
	}
	defer func() { <-s.sem }()
	if s.g.lease != nil {
		if _, _, err := s.g.checkLease(int64(time.Since(monoBase))); err != nil {
			s.cur = nil // buffered IDs are still unique, but the lease says stop
			return 0, err
		}
	}
	for len(s.cur) == 0 {
		select {
		case c := <-s.chunks:
			if c.err != nil {
				return 0, c.err
			}
			s.cur = c.ids
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-s.done:
			return 0, ErrSegmentClosed
		}
	}
	id := s.cur[0]
	s.cur = s.cur[1:]
	return id, nil
}

// Close stops the filler and waits for it to exit. Buffered IDs are dropped unissued.
func (s *Segment) Close() error {
	s.cancel()
	<-s.done
	return nil
}
