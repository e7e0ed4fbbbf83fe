package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockgov/lockgov/instrument/idempotency"
)

// TestDo_ThousandConcurrentCallsRunFnOnce: 1,000 concurrent Do calls with
// one key; fn runs exactly once and every caller gets its result.
func TestDo_ThousandConcurrentCallsRunFnOnce(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	s := newStore(t, single(t), idempotency.WithRegisterer(reg))
	ctx := timeout(t, 3*time.Minute)
	var runs atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Do(ctx, "pay-1", []byte("fp"), func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
				runs.Add(1)
				return []byte("receipt-42"), nil
			})
			if err != nil {
				errs <- err
				return
			}
			if string(res.Body) != "receipt-42" {
				errs <- fmt.Errorf("body %q", res.Body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}
	want := `
# HELP lockgov_idempotency_requests_total Idempotent requests by outcome (first run, replay of a stored result, in progress, fingerprint mismatch, error, run without the store under fail open, a write too few replicas acknowledged under WithReplicaAcks).
# TYPE lockgov_idempotency_requests_total counter
lockgov_idempotency_requests_total{outcome="degraded"} 0
lockgov_idempotency_requests_total{outcome="error"} 0
lockgov_idempotency_requests_total{outcome="first"} 1
lockgov_idempotency_requests_total{outcome="in_progress"} 0
lockgov_idempotency_requests_total{outcome="mismatch"} 0
lockgov_idempotency_requests_total{outcome="not_replicated"} 0
lockgov_idempotency_requests_total{outcome="replay"} 999
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lockgov_idempotency_requests_total"); err != nil {
		t.Fatal(err)
	}
}

// TestDo_OwnerCancelledThenExactlyOneRetryRuns: the first owner's context
// ends while fn runs; of 50 later concurrent attempts exactly one runs fn
// and all get its result.
func TestDo_OwnerCancelledThenExactlyOneRetryRuns(t *testing.T) {
	t.Parallel()
	s := newStore(t, single(t))
	ctx := timeout(t, 2*time.Minute)
	octx, cancel := context.WithCancel(ctx)
	started := make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		_, err := s.Do(octx, "k", nil, func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		})
		firstDone <- err
	}()
	<-started
	cancel()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("first owner: %v, want context.Canceled", err)
	}
	var runs atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Do(ctx, "k", nil, func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
				runs.Add(1)
				if a.N != 2 || a.Fence != 2 {
					return nil, fmt.Errorf("attempt %+v, want N=2 Fence=2", a)
				}
				return []byte("ok"), nil
			})
			if err != nil || string(res.Body) != "ok" {
				errs <- fmt.Errorf("Do = %q, %v", res.Body, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times after the cancelled owner, want 1", n)
	}
}

// TestDo_FailingFnLeavesKeyRetryable: fn's error releases the key, so the
// next Do runs fn again (no marker left before the write succeeded).
func TestDo_FailingFnLeavesKeyRetryable(t *testing.T) {
	t.Parallel()
	s := newStore(t, single(t))
	ctx := timeout(t, time.Minute)
	boom := errors.New("write failed")
	_, err := s.Do(ctx, "k", []byte("fp"), func(context.Context, idempotency.Attempt) ([]byte, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("first Do: %v, want fn's error", err)
	}
	res, err := s.Do(ctx, "k", []byte("fp"), func(_ context.Context, a idempotency.Attempt) ([]byte, error) {
		return []byte(fmt.Sprint(a.N)), nil
	})
	if err != nil || res.Replayed || string(res.Body) != "2" {
		t.Fatalf("retry = %+v, %v; want fn run again as attempt 2", res, err)
	}
	res, err = s.Do(ctx, "k", []byte("fp"), func(context.Context, idempotency.Attempt) ([]byte, error) {
		t.Error("fn ran for a completed key")
		return nil, nil
	})
	if err != nil || !res.Replayed || string(res.Body) != "2" {
		t.Fatalf("third Do = %+v, %v; want the replay of 2", res, err)
	}
}

// TestDo_DeadOwnersLeaseExpiresAndNextAttemptRuns: an owner that stops
// renewing (killed) blocks the key until its lease ends; then the next
// attempt runs with a higher fence.
func TestDo_DeadOwnersLeaseExpiresAndNextAttemptRuns(t *testing.T) {
	t.Parallel()
	c := single(t)
	// A lease long enough that the NoWait check below always finds it live
	// on a loaded machine.
	s := newStore(t, c, idempotency.WithLease(2*time.Second))
	ctx := timeout(t, time.Minute)
	// A dead owner: claim the key as begin.lua does and never renew.
	if err := idempotency.ClaimWithoutOwner(ctx, s, c, "k", []byte("fp")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do(ctx, "k", []byte("fp"), nil2, idempotency.NoWait()); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("NoWait on a live lease: %v, want ErrInProgress", err)
	}
	res, err := s.Do(ctx, "k", []byte("fp"), func(_ context.Context, a idempotency.Attempt) ([]byte, error) {
		return []byte(fmt.Sprint(a.N, a.Fence)), nil
	})
	if err != nil || string(res.Body) != "2 2" {
		t.Fatalf("Do after the lease = %q, %v; want attempt 2 with fence 2", res.Body, err)
	}
}

func nil2(context.Context, idempotency.Attempt) ([]byte, error) { return nil, nil }

// TestDo_WaitsUntilCtxEnds: a waiter gives up with ErrInProgress when its
// context ends while another attempt owns the key.
func TestDo_WaitsUntilCtxEnds(t *testing.T) {
	t.Parallel()
	s := newStore(t, single(t))
	ctx := timeout(t, time.Minute)
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, "k", nil, func(context.Context, idempotency.Attempt) ([]byte, error) {
			close(started)
			<-release
			return []byte("x"), nil
		})
		done <- err
	}()
	<-started
	// The owner holds the key until release is closed, so this deadline
	// always ends while the waiter waits. 5s, not 1s: the waiter's first
	// begin must come back before it (once, on a loaded machine, it did not).
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.Do(wctx, "k", nil, nil2); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("waiter with an ended ctx: %v, want ErrInProgress", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDo_MismatchAndBadInput(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, idempotency.WithMaxResultBytes(4))
	ctx := timeout(t, time.Minute)
	ok := func(context.Context, idempotency.Attempt) ([]byte, error) { return []byte("ok"), nil }
	if _, err := s.Do(ctx, "k", []byte("a"), ok); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do(ctx, "k", []byte("b"), ok); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("other fingerprint: %v, want ErrFingerprintMismatch", err)
	}
	var runs int
	big := func(context.Context, idempotency.Attempt) ([]byte, error) { runs++; return []byte("too big"), nil }
	for range 2 {
		if _, err := s.Do(ctx, "big", nil, big); !errors.Is(err, idempotency.ErrResultTooLarge) {
			t.Fatalf("big result: %v, want ErrResultTooLarge", err)
		}
	}
	if runs != 1 {
		t.Fatalf("fn with a too-large result ran %d times, want 1", runs)
	}
	if v, _ := c.HGet(ctx, idempotency.DefaultPrefix+"{big}", "body").Result(); v != "" {
		t.Fatalf("too-large result stored: %q", v)
	}
	n0, _ := c.DBSize(ctx).Result()
	for name, call := range map[string]func() error{
		"empty key": func() error { _, err := s.Do(ctx, "", nil, ok); return err },
		"long key":  func() error { _, err := s.Do(ctx, strings.Repeat("k", idempotency.MaxKeyBytes+1), nil, ok); return err },
		"long fp": func() error {
			_, err := s.Do(ctx, "x", make([]byte, idempotency.MaxFingerprintBytes+1), ok)
			return err
		},
		"nil fn": func() error { _, err := s.Do(ctx, "x", nil, nil); return err },
	} {
		if err := call(); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n, _ := c.DBSize(ctx).Result(); n != n0 {
		t.Fatalf("bad input wrote keys: DBSIZE %d -> %d", n0, n)
	}
}

// TestDo_PanickingFnReleasesTheKey: a panic in fn propagates, stops the
// lease renewal (goleak) and releases the key for the next attempt.
func TestDo_PanickingFnReleasesTheKey(t *testing.T) {
	t.Parallel()
	s := newStore(t, single(t))
	ctx := timeout(t, time.Minute)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not propagate")
			}
		}()
		_, _ = s.Do(ctx, "k", nil, func(context.Context, idempotency.Attempt) ([]byte, error) { panic("boom") })
	}()
	res, err := s.Do(ctx, "k", nil, func(context.Context, idempotency.Attempt) ([]byte, error) { return []byte("ran"), nil },
		idempotency.NoWait())
	if err != nil || string(res.Body) != "ran" {
		t.Fatalf("Do after a panic = %q, %v; want fn run again", res.Body, err)
	}
}

// TestDo_OwnerThatLosesItsKeyIsCancelled: when a successor owns the key,
// the next renewal fails, fn's context ends with cause ErrLeaseLost and
// its result is not stored.
func TestDo_OwnerThatLosesItsKeyIsCancelled(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, idempotency.WithLease(300*time.Millisecond))
	ctx := timeout(t, time.Minute)
	_, err := s.Do(ctx, "k", nil, func(fctx context.Context, _ idempotency.Attempt) ([]byte, error) {
		if err := idempotency.TakeOver(ctx, s, c, "k"); err != nil {
			return nil, err
		}
		<-fctx.Done()
		if cause := context.Cause(fctx); !errors.Is(cause, idempotency.ErrLeaseLost) {
			return nil, fmt.Errorf("fn's context ended with %v, want ErrLeaseLost", cause)
		}
		return []byte("late"), nil
	})
	if !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("Do = %v, want ErrLeaseLost", err)
	}
	if v, _ := c.HGet(ctx, idempotency.DefaultPrefix+"{k}", "body").Result(); v != "" {
		t.Fatalf("the lost owner's result was stored: %q", v)
	}
}
