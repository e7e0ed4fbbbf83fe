package quota_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// dropScriptReply makes the proxy drop the reply to the n-th script call
// (EVALSHA) after it is armed: the script ran, its client never hears, and
// go-redis resends it on another connection, as it does after any read
// timeout. dropped is closed once a reply was dropped.
type dropScriptReply struct {
	p       *testenv.Proxy
	n       atomic.Int64 // script calls left before the one to drop; 0: disarmed
	dropped atomic.Pointer[<-chan struct{}]
}

func (*dropScriptReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*dropScriptReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *dropScriptReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" && h.n.Load() > 0 && h.n.Add(-1) == 0 {
			ch := h.p.DropNextReply()
			h.dropped.Store(&ch)
		}
		return next(ctx, cmd)
	}
}

func (h *dropScriptReply) arm(n int64) { h.dropped.Store(nil); h.n.Store(n) }

func (h *dropScriptReply) wasDropped() bool {
	ch := h.dropped.Load()
	if ch == nil {
		return false
	}
	select {
	case <-*ch:
		return true
	default:
		return false
	}
}

// lostReplyQuota is a Quota whose client goes through a fault proxy, with
// timeouts short enough for go-redis to resend within the test, and its
// scripts loaded (a dropped reply must be the script's, not a NOSCRIPT that
// go-redis answers with EVAL).
func lostReplyQuota(t *testing.T, shards int) (*quota.Quota, *dropScriptReply, *redis.Client) {
	t.Helper()
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	c := testenv.NewLostReplyClient(t, p.Addr())
	h := &dropScriptReply{p: p}
	c.AddHook(h)
	q := newQuota(t, c, quota.WithShards(shards))
	ctx := timeout(t, time.Minute)
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
	return q, h, r.Client(t)
}

// TestLostReply_AddCreditsOnce: Add's script runs, its reply is lost and
// go-redis resends it. The resend must find the first run's record and
// credit nothing more: the caller called Add once, and a second credit is
// units that were never there to sell.
func TestLostReply_AddCreditsOnce(t *testing.T) {
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) {
			q, h, _ := lostReplyQuota(t, shards)
			ctx := timeout(t, time.Minute)
			if err := q.Set(ctx, "stock", 10); err != nil {
				t.Fatal(err)
			}
			h.arm(1)
			if err := q.Add(ctx, "stock", 8); err != nil {
				t.Fatalf("Add with its reply lost: %v", err)
			}
			if !h.wasDropped() {
				t.Fatal("no reply was dropped: the scenario did not happen")
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
	for _, tc := range []struct {
		name string
		nth  int64 // script call of Rebalance whose reply is lost
	}{
		{"take", 1},
		{"credit", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, h, direct := lostReplyQuota(t, 4)
			ctx := timeout(t, time.Minute)
			if err := q.Set(ctx, "stock", 40); err != nil { // 10 per shard
				t.Fatal(err)
			}
			for _, id := range []string{"a", "b", "c"} { // each empties one shard
				if _, err := q.Deduct(ctx, "stock", 10, id); err != nil {
					t.Fatal(err)
				}
			}
			h.arm(tc.nth)
			if err := q.Rebalance(ctx, "stock"); err != nil {
				t.Fatalf("Rebalance with a reply lost: %v", err)
			}
			if !h.wasDropped() {
				t.Fatal("no reply was dropped: the scenario did not happen")
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
