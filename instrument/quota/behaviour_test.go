package quota_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestBadInput_IsAClearErrorAndWritesNothing checks every rejected argument
// returns ErrInvalid (or ErrOverflow) and leaves Redis empty or unchanged.
func TestBadInput_IsAClearErrorAndWritesNothing(t *testing.T) {
	t.Parallel()
	c := single(t)
	q := newQuota(t, c)
	ctx := timeout(t, time.Minute)
	long := strings.Repeat("k", quota.MaxKeyBytes+1)
	longID := strings.Repeat("r", quota.MaxRequestIDBytes+1)
	cases := []struct {
		name string
		call func() error
	}{
		{"zero amount", func() error { _, err := q.Deduct(ctx, "k", 0, "r"); return err }},
		{"negative amount", func() error { _, err := q.Deduct(ctx, "k", -1, "r"); return err }},
		{"amount over MaxAmount", func() error { _, err := q.Deduct(ctx, "k", math.MaxInt64, "r"); return err }},
		{"empty key", func() error { _, err := q.Deduct(ctx, "", 1, "r"); return err }},
		{"key over the limit", func() error { _, err := q.Deduct(ctx, long, 1, "r"); return err }},
		{"empty request id", func() error { _, err := q.Deduct(ctx, "k", 1, ""); return err }},
		{"request id over the limit", func() error { _, err := q.Deduct(ctx, "k", 1, longID); return err }},
		{"refund zero", func() error { _, err := q.Refund(ctx, "k", 0, "r"); return err }},
		{"refund empty id", func() error { _, err := q.Refund(ctx, "k", 1, ""); return err }},
		{"set negative", func() error { return q.Set(ctx, "k", -1) }},
		{"set over MaxAmount", func() error { return q.Set(ctx, "k", math.MaxInt64) }},
		{"add zero", func() error { return q.Add(ctx, "k", 0) }},
		{"add empty key", func() error { return q.Add(ctx, "", 1) }},
		{"remaining empty key", func() error { _, err := q.Remaining(ctx, ""); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, quota.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE = %d, %v after rejected calls; want 0", n, err)
	}

	// Overflow: a credit past MaxAmount is refused and changes nothing.
	if err := q.Set(ctx, "k", quota.MaxAmount); err != nil {
		t.Fatal(err)
	}
	if err := q.Add(ctx, "k", 1); !errors.Is(err, quota.ErrOverflow) {
		t.Fatalf("Add past MaxAmount: %v, want ErrOverflow", err)
	}
	if _, err := q.Refund(ctx, "k", 1, "r1"); !errors.Is(err, quota.ErrOverflow) {
		t.Fatalf("Refund past MaxAmount: %v, want ErrOverflow", err)
	}
	if r, err := q.Remaining(ctx, "k"); err != nil || r != quota.MaxAmount {
		t.Fatalf("Remaining = %d, %v; want %d", r, err, int64(quota.MaxAmount))
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 1 {
		t.Fatalf("DBSIZE = %d, %v; want 1 (the bucket, no request record)", n, err)
	}
}

func TestNew_RejectsBadOptions(t *testing.T) {
	t.Parallel()
	c := single(t)
	for _, o := range []quota.Option{quota.WithShards(0), quota.WithShards(quota.MaxShards + 1), quota.WithPrefix("a{b"), quota.WithRequestTTL(0)} {
		if _, err := quota.New(c, o); err == nil {
			t.Errorf("New accepted a bad option")
		}
	}
	if _, err := quota.New(nil); err == nil {
		t.Error("New accepted a nil client")
	}
}

// TestDeductRefund_RequestIDAppliesOnce checks a retried Deduct or Refund
// changes the balance once and answers as the first call did, including a
// retried short Deduct after the balance was topped up, and that a request
// id reused with another amount is refused.
func TestDeductRefund_RequestIDAppliesOnce(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 4} {
		t.Run(map[int]string{1: "one bucket", 4: "four shards"}[shards], func(t *testing.T) {
			t.Parallel()
			q := newQuota(t, single(t), quota.WithShards(shards))
			ctx := timeout(t, time.Minute)
			if err := q.Set(ctx, "k", 8); err != nil {
				t.Fatal(err)
			}
			first, err := q.Deduct(ctx, "k", 2, "d1")
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if again, err := q.Deduct(ctx, "k", 2, "d1"); err != nil || again != first {
					t.Fatalf("retry = %d, %v; want %d, nil", again, err, first)
				}
			}
			if _, err := q.Deduct(ctx, "k", 3, "d1"); !errors.Is(err, quota.ErrRequestIDReused) {
				t.Fatalf("reused id with another amount: %v, want ErrRequestIDReused", err)
			}
			if r, _ := q.Remaining(ctx, "k"); r != 6 {
				t.Fatalf("Remaining = %d, want 6", r)
			}
			if _, err := q.Deduct(ctx, "k", 100, "big"); !errors.Is(err, quota.ErrInsufficient) {
				t.Fatalf("Deduct 100: %v, want ErrInsufficient", err)
			}
			for range 2 {
				if _, err := q.Refund(ctx, "k", 2, "r1"); err != nil {
					t.Fatal(err)
				}
			}
			if r, _ := q.Remaining(ctx, "k"); r != 8 {
				t.Fatalf("Remaining after a refund retried = %d, want 8", r)
			}
			if err := q.Add(ctx, "k", 1000); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Deduct(ctx, "k", 100, "big"); !errors.Is(err, quota.ErrInsufficient) {
				t.Fatalf("retried short Deduct after a top-up: %v, want the first answer ErrInsufficient", err)
			}
			if r, _ := q.Remaining(ctx, "k"); r != 1008 {
				t.Fatalf("Remaining = %d, want 1008", r)
			}
		})
	}
}

// TestSharded_RetryAfterRefundDoesNotDeductTwice: a request found its first
// shard empty and was served by another; a refund then fills the first
// shard. The retry must not deduct there.
func TestSharded_RetryAfterRefundDoesNotDeductTwice(t *testing.T) {
	t.Parallel()
	q := newQuota(t, single(t), quota.WithShards(2))
	ctx := timeout(t, time.Minute)
	if err := q.Set(ctx, "k", 2); err != nil { // one unit per shard
		t.Fatal(err)
	}
	// Empty whichever shard req-a starts at, with other ids, until req-a
	// has to fall back: deduct until only one unit is left.
	if _, err := q.Deduct(ctx, "k", 1, "req-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Deduct(ctx, "k", 1, "req-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Deduct(ctx, "k", 1, "req-c"); !errors.Is(err, quota.ErrInsufficient) {
		t.Fatalf("third Deduct: %v, want ErrInsufficient", err)
	}
	// Refill both shards; every retry answers as before.
	if err := q.Add(ctx, "k", 2); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"req-a", "req-b"} {
		if _, err := q.Deduct(ctx, "k", 1, id); err != nil {
			t.Fatalf("retry %s: %v", id, err)
		}
	}
	if _, err := q.Deduct(ctx, "k", 1, "req-c"); !errors.Is(err, quota.ErrInsufficient) {
		t.Fatalf("retry req-c: %v, want ErrInsufficient", err)
	}
	if r, _ := q.Remaining(ctx, "k"); r != 2 {
		t.Fatalf("Remaining = %d, want 2: a retry deducted again", r)
	}
}

// TestRebalance_EvensOutShards checks Rebalance moves a drained key's
// balance back over every shard and keeps the total.
func TestRebalance_EvensOutShards(t *testing.T) {
	t.Parallel()
	c := single(t)
	q := newQuota(t, c, quota.WithShards(4))
	ctx := timeout(t, time.Minute)
	if err := q.Set(ctx, "k", 40); err != nil { // 10 per shard
		t.Fatal(err)
	}
	// Each deduction of 10 empties one shard: three leave one shard full.
	for _, id := range []string{"a", "b", "c"} {
		if _, err := q.Deduct(ctx, "k", 10, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Rebalance(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for i := range 4 {
		v, err := c.HGet(ctx, fmt.Sprintf("%s{k#%d}", quota.DefaultPrefix, i), "remain").Int64()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if fmt.Sprint(got) != "[3 3 2 2]" {
		t.Fatalf("shards after Rebalance = %v, want [3 3 2 2]", got)
	}
}

// TestCluster_ShardsSpreadOverSlots checks each shard of one key has its
// own hash slot and a bucket's request records share its slot.
func TestCluster_ShardsSpreadOverSlots(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	c := cl.Client(t)
	q := newQuota(t, c, quota.WithShards(8))
	ctx := timeout(t, time.Minute)
	if err := q.Set(ctx, "hot", 80); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := q.Deduct(ctx, "hot", 1, "id-"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	slots := map[int64]string{}
	err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, quota.DefaultPrefix+"*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			s, err := n.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			bucket := k
			if i := strings.Index(k, "}"); i >= 0 {
				bucket = k[:i+1]
			}
			if b, ok := slots[s]; ok && b != bucket {
				mu.Unlock()
				return fmt.Errorf("%s and %s share slot %d", b, bucket, s)
			}
			slots[s] = bucket
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) != 8 {
		t.Fatalf("%d slots hold the 8 shards, want 8", len(slots))
	}
}
