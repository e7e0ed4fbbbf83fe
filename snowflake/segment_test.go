package snowflake

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestSegment_IncreasingAndUniqueAcrossCallers(t *testing.T) {
	g := mustNew(t, 9)
	s, err := NewSegment(g, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var prev int64
			for range 5000 {
				id, err := s.Next(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if id <= prev {
					t.Errorf("id %d after %d", id, prev)
					return
				}
				prev = id
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate %d", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func TestSegment_RefusesAfterLeaseLossAndClose(t *testing.T) {
	l := validLease(2)
	g := mustNew(t, 2, WithLease(l))
	s, err := NewSegment(g, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.set(LeaseState{ValidUntil: time.Now().Add(-time.Second)})
	if _, err := s.Next(context.Background()); !errors.Is(err, ErrWorkerLeaseLost) {
		t.Fatalf("after lease loss: %v, want ErrWorkerLeaseLost", err)
	}
	s.Close()
	if _, err := s.Next(context.Background()); !errors.Is(err, ErrSegmentClosed) {
		t.Fatalf("after Close: %v, want ErrSegmentClosed", err)
	}
	if _, err := NewSegment(g, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("size 0: %v, want ErrInvalid", err)
	}
}

// TestSegment_EmptyBufferWaitersHonourContextAndClose: with the filler stuck (a frozen clock
// and a sequence shorter than the buffer), the caller waiting for the next buffer and the
// caller queued behind it both return their contexts' errors, and a caller still waiting
// when the Segment closes gets ErrSegmentClosed.
func TestSegment_EmptyBufferWaitersHonourContextAndClose(t *testing.T) {
	g := mustNew(t, 1, WithLayout(layout16), WithClock(frozenClock{wall: time.Now()}))
	s, err := NewSegment(g, 64)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := s.Next(ctx)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiter with a deadline: %v, want context.DeadlineExceeded", err)
		}
	}
	go func() {
		_, err := s.Next(context.Background())
		errs <- err
	}()
	// Close while that caller waits (or before it starts: the error is the same).
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, ErrSegmentClosed) {
			t.Fatalf("waiter at Close: %v, want ErrSegmentClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter still waits 10 s after Close")
	}
}
