package quota_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// lostReplyQuota is a Quota on its own redis-server with its scripts loaded,
// and a ResendOnce on its client for the script in file (this package's
// source): armed, the next call of that script runs twice, its first reply
// lost, as when go-redis resends it after a read timeout.
func lostReplyQuota(t *testing.T, shards int, file string) (*quota.Quota, *testenv.ResendOnce, *redis.Client) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := testenv.NewRedis(t)
	c := r.Client(t)
	h := &testenv.ResendOnce{SHA: testenv.ScriptSHA(string(src))}
	c.AddHook(h)
	q := newQuota(t, c, quota.WithShards(shards))
	ctx := timeout(t, time.Minute)
	// Every script runs once first, so that the call run twice is the script
	// and not a NOSCRIPT.
	if err := q.Set(ctx, "warm", 10); err != nil {
		t.Fatal(err)
	}
	if err := q.Add(ctx, "warm", 4); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Deduct(ctx, "warm", 1, "warm"); err != nil {
		t.Fatal(err)
	}
	if err := q.Rebalance(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	return q, h, c
}

// TestLostReply_AddCreditsOnce: Add's script runs, its reply is lost and
// go-redis resends it. The resend must find the first run's record and
// credit nothing more: the caller called Add once, and a second credit is
// units that were never there to sell.
func TestLostReply_AddCreditsOnce(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) {
			t.Parallel()
			q, h, _ := lostReplyQuota(t, shards, "credit.lua")
			ctx := timeout(t, time.Minute)
			if err := q.Set(ctx, "stock", 10); err != nil {
				t.Fatal(err)
			}
			h.Arm()
			if err := q.Add(ctx, "stock", 8); err != nil {
				t.Fatalf("Add with its reply lost: %v", err)
			}
			if !h.Resent() {
				t.Fatal("no credit was resent: the scenario did not happen")
			}
			if got, err := q.Remaining(ctx, "stock"); err != nil || got != 18 {
				t.Fatalf("Remaining after Add(8) to 10 = %d, %v; want 18", got, err)
			}
		})
	}
}

// TestLostReply_RebalanceConservesUnits: Rebalance takes units from a rich
// shard and credits poor ones. When the reply of a take or of a credit is
// lost and go-redis resends it, the units must still add up: a take run
// twice loses the first take's units (they were taken and never credited),
// a credit run twice creates units, which is an oversell.
func TestLostReply_RebalanceConservesUnits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string // Rebalance's step whose reply is lost
	}{
		{"take", "take.lua"},
		{"credit", "credit.lua"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q, h, direct := lostReplyQuota(t, 4, tc.script)
			ctx := timeout(t, time.Minute)
			if err := q.Set(ctx, "stock", 40); err != nil { // 10 per shard
				t.Fatal(err)
			}
			for _, id := range []string{"a", "b", "c"} { // each empties one shard
				if _, err := q.Deduct(ctx, "stock", 10, id); err != nil {
					t.Fatal(err)
				}
			}
			h.Arm()
			if err := q.Rebalance(ctx, "stock"); err != nil {
				t.Fatalf("Rebalance with a reply lost: %v", err)
			}
			if !h.Resent() {
				t.Fatal("no step was resent: the scenario did not happen")
			}
			var shards []int64
			var sum int64
			for i := range 4 {
				v, err := direct.HGet(ctx, fmt.Sprintf("%s{stock#%d}", quota.DefaultPrefix, i), "remain").Int64()
				if err != nil {
					t.Fatal(err)
				}
				shards, sum = append(shards, v), sum+v
			}
			if sum != 10 {
				t.Fatalf("shards %v after Rebalance add up to %d, want the 10 units left", shards, sum)
			}
		})
	}
}
