package main

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockgov/lockgov/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun_NeverOverdrawsAndUsesTheWholeQuota: 3 merchants x 60 orders of 1-5
// units against a quota of 100 each: every merchant ends between 0 and 4
// (less than the smallest refused amount would leave), never below 0.
func TestRun_NeverOverdrawsAndUsesTheWholeQuota(t *testing.T) {
	r := testenv.NewRedis(t)
	if err := run(r.Addr(), 3, 60, 100); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	for m := 1; m <= 3; m++ {
		remain, err := c.HGet(context.Background(), quotaKey(m), "remain").Int64()
		if err != nil {
			t.Fatal(err)
		}
		if remain < 0 || remain > 4 {
			t.Errorf("merchant %d remain %d, want 0..4 (no overdraw, quota used up)", m, remain)
		}
	}
}

func TestDeduct_RefusesWhatIsNotThere(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	ctx := context.Background()
	c.HSet(ctx, quotaKey(9), "remain", 3)
	if left, err := deduct(ctx, c, 9, 2); err != nil || left != 1 {
		t.Fatalf("deduct 2 of 3 = %d, %v", left, err)
	}
	if _, err := deduct(ctx, c, 9, 2); !errors.Is(err, ErrQuotaNotEnough) {
		t.Fatalf("deduct 2 of 1 = %v, want ErrQuotaNotEnough", err)
	}
	if _, err := deduct(ctx, c, 404, 1); !errors.Is(err, ErrQuotaNotEnough) {
		t.Fatalf("unknown merchant = %v, want ErrQuotaNotEnough", err)
	}
	if _, err := deduct(ctx, c, 9, 0); err == nil {
		t.Fatal("amount 0 accepted")
	}
	if v := c.HGet(ctx, quotaKey(9), "remain").Val(); v != "1" {
		t.Fatalf("remain %s after refusals, want 1", v)
	}
}

func TestRun_BadInput(t *testing.T) {
	if err := run("127.0.0.1:1", 0, 1, 1); err == nil {
		t.Fatal("merchants=0 accepted")
	}
}
