package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
)

// loadingScripts answers every script call (EVALSHA/EVAL) through a client
// with the error reply of a Redis loading its data set, sent by the server:
// the call is rewritten in place into an EVAL of redis.error_reply with the
// same keys and arguments, so the lock script never runs.
type loadingScripts struct{ answered atomic.Int32 }

const loadingReply = "return redis.error_reply('LOADING Redis is loading the dataset in memory')"

func (*loadingScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*loadingScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *loadingScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.answered.Add(1)
			a := cmd.Args()
			a[0], a[1] = "eval", loadingReply
		}
		return next(ctx, cmd)
	}
}

// TestStoreFailure_QuorumWithALoadingNode: node 0 of a three-node quorum
// answers LOADING (the server's own reply); what the other two do decides.
// FailOpen degrades only when the nodes that did answer cannot make a
// majority, and never when a majority granted or refused: the lock is
// then the quorum's (fence > 0) or ErrNotAcquired. When an error reply
// (OOM) keeps the majority from answering, the store answered: an error,
// not degraded, under either policy. A grant of a minority is given back
// in every case.
func TestStoreFailure_QuorumWithALoadingNode(t *testing.T) {
	t.Parallel()
	const key = "lock:order:1"
	for _, c := range []struct {
		name     string
		killed   []int
		held     []int // another owner holds the key there
		oom      []int
		outcome  string // "quorum", "not-acquired", "store-failure", "error"
		freeNode []int  // nodes that must not hold this caller's grant afterwards
	}{
		{name: "others-free", outcome: "quorum"},
		{name: "others-held", held: []int{1, 2}, outcome: "not-acquired"},
		{name: "one-held-one-free", held: []int{1}, outcome: "not-acquired"},
		{name: "one-killed-one-free", killed: []int{1}, outcome: "store-failure", freeNode: []int{2}},
		{name: "one-killed-one-held", killed: []int{1}, held: []int{2}, outcome: "store-failure"},
		{name: "one-oom-one-free", oom: []int{1}, outcome: "error", freeNode: []int{2}},
	} {
		for _, p := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
			t.Run(fmt.Sprintf("%s/%s", c.name, p), func(t *testing.T) {
				t.Parallel()
				q := newQuorumGoverned(t, killNode, p)
				loading := &loadingScripts{}
				q.clients[0].AddHook(loading)
				ctx := withTimeout(t, 2*time.Minute)
				for _, i := range c.held {
					q.hold(t, ctx, i, key)
				}
				for _, i := range c.oom {
					if err := q.admins[i].ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = q.admins[i].ConfigSet(context.Background(), "maxmemory", "0").Err() })
				}
				for _, i := range c.killed {
					q.put(t, killNode, i)
				}
				lease, err := q.locker.Acquire(ctx, key, instrument.WithTTL(time.Minute), instrument.FailFast())
				if loading.answered.Load() == 0 {
					t.Fatal("node 0 never answered LOADING: the hook did not run (the test's premise)")
				}
				degraded := degradedLocks(t, q.reg)
				want := c.outcome
				if want == "store-failure" {
					want = map[instrument.StoreFailurePolicy]string{instrument.FailClosed: "store-failure", instrument.FailOpen: "local"}[p]
				}
				var got string
				switch {
				case err == nil && lease.Fence() == 0:
					got = "local"
				case err == nil:
					got = "quorum"
				case errors.Is(err, instrument.ErrNotAcquired):
					got = "not-acquired"
				case storefail.Unavailable(err):
					got = "store-failure"
				default:
					got = "error"
				}
				if err == nil {
					defer lease.Release(ctx)
				}
				if got != want {
					t.Fatalf("Acquire: %s (err %v), want %s", got, err, want)
				}
				if (got == "error" || got == "store-failure") && !strings.Contains(err.Error(), "node 0: LOADING ") {
					t.Errorf("err = %v: want node 0's LOADING reply in it (the test's premise)", err)
				}
				if got == "error" && (storefail.Unavailable(err) || errors.Is(err, instrument.ErrNotAcquired)) {
					t.Errorf("err = %v: want neither a store failure nor ErrNotAcquired", err)
				}
				if wantDegraded := map[bool]float64{true: 1}[got == "local"]; degraded != wantDegraded {
					t.Errorf("degraded = %v, want %v", degraded, wantDegraded)
				}
				for _, i := range c.freeNode {
					if v := q.admins[i].Get(ctx, key).Val(); v != "" {
						t.Errorf("node %d still holds %q: a minority's grant was not given back", i, v)
					}
				}
			})
		}
	}
}
