package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestDo_AcrossASlotMigration moves the slot of an idempotency record to
// another primary the way redis-cli --cluster reshard does, with fn
// running: the record is claimed on the source, moved while fn runs (its
// renewals follow ASK to the target), and finished on the target. A
// record created during the migration (a key new to the slot, ASK to the
// target) and one completed before it are replayed after it. fn runs once
// per key. Every script here has one key, so Redis never answers TRYAGAIN:
// a resharding is invisible to Do but for a redirect.
func TestDo_AcrossASlotMigration(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	c := cl.Client(t)
	// A lease renewed twice while fn runs, with a renewal's slack wide
	// enough for a loaded machine running tests side by side.
	s := newStore(t, c, idempotency.WithLease(1500*time.Millisecond))
	ctx := timeout(t, 30*time.Second)
	// Three keys with one hash tag: one slot.
	const running, before, during = "pay-{7}-running", "pay-{7}-before", "pay-{7}-during"
	var runs [3]atomic.Int64
	do := func(i int, key string, fn func()) idempotency.Result {
		t.Helper()
		res, err := s.Do(ctx, key, nil, func(context.Context, idempotency.Attempt) ([]byte, error) {
			runs[i].Add(1)
			if fn != nil {
				fn()
			}
			return []byte(key), nil
		})
		if err != nil {
			t.Fatalf("Do %s: %v", key, err)
		}
		if string(res.Body) != key {
			t.Fatalf("Do %s: body %q", key, res.Body)
		}
		return res
	}
	do(1, before, nil)

	var m *testenv.SlotMigration
	do(0, running, func() {
		// Claimed on the source; move the slot's keys while fn runs, and
		// work on past two renewals.
		rec := idempotency.DefaultPrefix + "{" + running + "}"
		var err error
		if m, err = cl.BeginKeyMigration(rec); err != nil {
			t.Error(err)
			return
		}
		if err := m.Move(rec); err != nil {
			t.Error(err)
			return
		}
		// Work on until a renewal has reached the moved record (its PTTL,
		// read through ASK, goes up), then once more.
		pttl := func() (time.Duration, bool) {
			p, err := c.PTTL(ctx, rec).Result()
			if err != nil {
				t.Errorf("PTTL of the moved record: %v", err)
				return 0, false
			}
			if p <= 0 {
				t.Errorf("the record's PTTL is %v during fn", p)
				return 0, false
			}
			return p, true
		}
		// A renewal shows as the PTTL going up from one read to the next.
		// (Against the first read of each round, as before, a round whose
		// first read came within a millisecond of a renewal read the full
		// lease, which no later read can exceed: the loop ran to the test's
		// deadline, once in eight runs.)
		prev, ok := pttl()
		if !ok {
			return
		}
		renewals := 0
		for renewals < 2 && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			p, ok := pttl()
			if !ok {
				return
			}
			if p > prev {
				renewals++
			}
			prev = p
		}
		if renewals < 2 {
			t.Errorf("%d renewals reached the moved record before the test's deadline, want 2", renewals)
		}
	})
	if m == nil {
		t.FailNow()
	}
	defer func() { _ = m.Finish(10) }()
	do(2, during, nil)
	if res := do(1, before, nil); !res.Replayed {
		t.Fatalf("%s not replayed during the migration", before)
	}
	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{running, before, during} {
		if res := do(i, key, nil); !res.Replayed {
			t.Fatalf("%s not replayed after the migration", key)
		}
		if n := runs[i].Load(); n != 1 {
			t.Fatalf("%s: fn ran %d times, want 1", key, n)
		}
	}
}
