package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

// recordKey is the Redis key of an idempotency key's record under the
// default prefix.
func recordKey(key string) string { return idempotency.DefaultPrefix + "{" + key + "}" }

// TestEviction_ACompletedRecordEvictedRunsFnAgain: every record has a TTL
// (the result TTL), so a Redis with maxmemory and any eviction policy but
// noeviction may evict it. The store cannot tell an evicted record from a key
// never used: the retry runs fn a second time, with the attempt number (and
// fence) starting again at 1. Inherent to a store that deletes data; the doc's
// Failure modes and the agent's eviction finding say so.
func TestEviction_ACompletedRecordEvictedRunsFnAgain(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"volatile-lru", "allkeys-lru"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			c := single(t)
			s := newStore(t, c)
			ctx := timeout(t, 30*time.Second)
			var runs []idempotency.Attempt
			fn := func(_ context.Context, a idempotency.Attempt) ([]byte, error) {
				runs = append(runs, a)
				return []byte("charged"), nil
			}
			if _, err := s.Do(ctx, "pay-1", []byte("fp"), fn); err != nil {
				t.Fatal(err)
			}
			testenv.Evict(t, c, policy, recordKey("pay-1"))
			res, err := s.Do(ctx, "pay-1", []byte("fp"), fn)
			if err != nil {
				t.Fatal(err)
			}
			if res.Replayed || len(runs) != 2 {
				t.Fatalf("after eviction: replayed %v, fn ran %d times; want fn run again (the record is gone)", res.Replayed, len(runs))
			}
			if runs[1].Fence != runs[0].Fence {
				t.Fatalf("fences %d then %d: want the count restarted with the record", runs[0].Fence, runs[1].Fence)
			}
		})
	}
}

// TestEviction_AnInFlightRecordEvictedLetsASecondAttemptRunBesideTheFirst:
// the record of an attempt still running is evicted; a second Do claims the
// key at once and runs fn beside the first, with the same fence (the count
// restarted). The first learns it at its next renewal: its fn's context ends
// with ErrLeaseLost and its Do returns ErrLeaseLost, its result discarded.
// The effect both made is the caller's to guard (a unique constraint).
func TestEviction_AnInFlightRecordEvictedLetsASecondAttemptRunBesideTheFirst(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, idempotency.WithLease(900*time.Millisecond))
	ctx := timeout(t, 30*time.Second)

	started := make(chan idempotency.Attempt, 1)
	firstDone := make(chan error, 1)
	var firstCause error
	go func() {
		_, err := s.Do(ctx, "pay-2", []byte("fp"), func(fctx context.Context, a idempotency.Attempt) ([]byte, error) {
			started <- a
			<-fctx.Done() // runs until the store takes the key away
			firstCause = context.Cause(fctx)
			return []byte("first"), nil
		})
		firstDone <- err
	}()
	var first idempotency.Attempt
	select {
	case first = <-started:
	case <-ctx.Done():
		t.Fatal("first attempt never started")
	}
	testenv.Evict(t, c, "volatile-lru", recordKey("pay-2"))

	var second idempotency.Attempt
	res, err := s.Do(ctx, "pay-2", []byte("fp"), func(_ context.Context, a idempotency.Attempt) ([]byte, error) {
		second = a
		return []byte("second"), nil
	}, idempotency.NoWait())
	if err != nil {
		t.Fatalf("second Do while the first runs, its record evicted: %v (want it to run: the store has no record)", err)
	}
	if res.Replayed || second.N == 0 {
		t.Fatalf("second Do replayed %v, ran %v: want fn run beside the first", res.Replayed, second.N != 0)
	}
	if second.Fence != first.Fence {
		t.Errorf("fences: first %d, second %d; want equal (the count restarted with the record)", first.Fence, second.Fence)
	}
	select {
	case err = <-firstDone:
	case <-ctx.Done():
		t.Fatal("first Do never returned")
	}
	if !errors.Is(err, idempotency.ErrLeaseLost) || !errors.Is(firstCause, idempotency.ErrLeaseLost) {
		t.Fatalf("first Do = %v, its fn's cause %v; want ErrLeaseLost for both", err, firstCause)
	}
	res, err = s.Do(ctx, "pay-2", []byte("fp"), func(context.Context, idempotency.Attempt) ([]byte, error) {
		t.Error("fn ran a third time")
		return nil, nil
	})
	if err != nil || !res.Replayed || string(res.Body) != "second" {
		t.Fatalf("third Do = %q replayed %v, %v; want the second's result replayed", res.Body, res.Replayed, err)
	}
}
