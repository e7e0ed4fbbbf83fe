package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/instrument/fence/redisfence"
	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/leakcheck"
	"github.com/lockgov/lockgov/internal/testenv"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// TestRun_NeverOverdrawsAndUsesTheWholeQuota: 3 merchants x 60 orders of 1-5
// units against a quota of 100 each: every merchant ends between 0 and 4
// (less than the smallest refused amount would leave), never below 0.
func TestRun_NeverOverdrawsAndUsesTheWholeQuota(t *testing.T) {
	r := testenv.NewRedis(t)
	if err := run(r.Addr(), 3, 60, 100); err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, r.Addr())
	for m := 1; m <= 3; m++ {
		remain, err := q.Remaining(context.Background(), quotaKey(m))
		if err != nil {
			t.Fatal(err)
		}
		if remain < 0 || remain > 4 {
			t.Errorf("merchant %d remain %d, want 0..4 (no overdraw, quota used up)", m, remain)
		}
	}
}

func TestDeduct_RefusesWhatIsNotThere(t *testing.T) {
	q := newQuota(t, testenv.NewRedis(t).Addr())
	ctx := context.Background()
	if err := q.Set(ctx, quotaKey(9), 3); err != nil {
		t.Fatal(err)
	}
	if left, err := deduct(ctx, q, 9, 2, "o1"); err != nil || left != 1 {
		t.Fatalf("deduct 2 of 3 = %d, %v", left, err)
	}
	if left, err := deduct(ctx, q, 9, 2, "o1"); err != nil || left != 1 {
		t.Fatalf("retried order o1 = %d, %v; want the first answer 1, nil", left, err)
	}
	if _, err := deduct(ctx, q, 9, 2, "o2"); !errors.Is(err, ErrQuotaNotEnough) {
		t.Fatalf("deduct 2 of 1 = %v, want ErrQuotaNotEnough", err)
	}
	if _, err := deduct(ctx, q, 404, 1, "o3"); !errors.Is(err, ErrQuotaNotEnough) {
		t.Fatalf("unknown merchant = %v, want ErrQuotaNotEnough", err)
	}
	if _, err := deduct(ctx, q, 9, 0, "o4"); err == nil {
		t.Fatal("amount 0 accepted")
	}
	if v, err := q.Remaining(ctx, quotaKey(9)); err != nil || v != 1 {
		t.Fatalf("remain %d, %v after refusals, want 1", v, err)
	}
}

func newQuota(t *testing.T, addr string) *quota.Quota {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	q, err := quota.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestRun_BadInput(t *testing.T) {
	if err := run("127.0.0.1:1", 0, 1, 1); err == nil {
		t.Fatal("merchants=0 accepted")
	}
}

// TestSettle_StaleHolderCannotOverwriteTheLastOrder: the record written by
// a later holder survives a write from an earlier lease's fence.
func TestSettle_StaleHolderCannotOverwriteTheLastOrder(t *testing.T) {
	r := testenv.NewRedis(t)
	c := r.Client(t)
	q := newQuota(t, r.Addr())
	fw, err := redisfence.New(c)
	if err != nil {
		t.Fatal(err)
	}
	l, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := q.Set(ctx, quotaKey(1), 10); err != nil {
		t.Fatal(err)
	}
	if err := settle(ctx, l, q, fw, 1, 1, "o1"); err != nil {
		t.Fatal(err)
	}
	_, first, err := fw.Get(ctx, lastOrderKey(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := settle(ctx, l, q, fw, 1, 1, "o2"); err != nil {
		t.Fatal(err)
	}
	// The first holder, had it been paused, writes now with its fence.
	if err := fw.Set(ctx, lastOrderKey(1), "o1-late", first, 0); !errors.Is(err, fence.ErrStaleFence) {
		t.Fatalf("late write = %v, want ErrStaleFence", err)
	}
	if v, _, err := fw.Get(ctx, lastOrderKey(1)); err != nil || v != "o2" {
		t.Fatalf("last order = %q %v, want o2", v, err)
	}
	if remain, _ := q.Remaining(ctx, quotaKey(1)); remain != 8 {
		t.Fatalf("remaining %d, want 8", remain)
	}
}
