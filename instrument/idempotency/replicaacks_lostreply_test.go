package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_AWaitWhoseReplyIsLostIsNotReplicated: with
// WithReplicaAcks, the replica stopped before the claim or while fn runs,
// begin.lua or finish.lua runs on the primary and answers, and the
// connection is killed (CLIENT KILL) while its WAIT blocks; the client has
// retries off, so go-redis stamps the WAIT's EOF on the script's answer
// too. The claim is on the primary: fn must not run (not even degraded,
// under FailOpen), the key must be released (the next Do is attempt 2, at
// once, not after the 30s lease). The completed record is on the primary:
// Do must return fn's result with ErrNotReplicated, not Degraded with no
// error (under FailOpen a success no replica has) nor a store error
// without the result; the retry replays it. fn runs once in all.
func TestReplicaAcks_AWaitWhoseReplyIsLostIsNotReplicated(t *testing.T) {
	t.Parallel()
	for _, stopWhen := range []string{"claim", "completion"} {
		for _, policy := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
			t.Run(fmt.Sprintf("%s/%v", stopWhen, policy), func(t *testing.T) {
				t.Parallel()
				ctx := timeout(t, 2*time.Minute)
				rp := testenv.NewReplicated(t)
				c := replicaacktest.ClientWith(t, rp.Primary.Addr(), func(o *redis.Options) { o.MaxRetries = -1 })
				reg := prometheus.NewPedanticRegistry()
				s := newStore(t, c, idempotency.WithReplicaAcks(1, healthyAckTimeout),
					idempotency.WithStoreFailure(policy), idempotency.WithRegisterer(reg))
				var runs atomic.Int32
				// Load the scripts, so that the pipeline killed is the EVALSHA's.
				if _, err := s.Do(ctx, "warm", nil, counted(&runs)); err != nil {
					t.Fatal(err)
				}
				runs.Store(0)
				var resume func()
				paused := make(chan struct{}) // closed once the replica is stopped
				if stopWhen == "claim" {
					resume = rp.PauseReplica(t)
					close(paused)
				}
				type result struct {
					res idempotency.Result
					err error
				}
				done := make(chan result, 1)
				go func() {
					res, err := s.Do(ctx, "pay:order-1", []byte("fp"), func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
						if stopWhen == "completion" {
							resume = rp.PauseReplica(t) // after the claim was acknowledged
							close(paused)
						}
						return counted(&runs)(ctx, a)
					})
					done <- result{res, err}
				}()
				select { // the WAIT killed is the one after the replica stopped
				case <-paused:
				case r := <-done:
					t.Fatalf("Do returned before the replica stopped: %+v, %v", r.res, r.err)
				}
				rp.Primary.KillBlockedIn(t, "wait")
				r := <-done
				if !errors.Is(r.err, idempotency.ErrNotReplicated) {
					t.Errorf("Do whose WAIT reply was lost = %+v, %v; want ErrNotReplicated", r.res, r.err)
				}
				if n := degradedCount(t, reg, "idempotency"); n != 0 {
					t.Errorf("lockgov_store_degraded_total = %v; a WAIT's lost reply is not a store failure", n)
				}
				wantRuns, wantState := map[string]int32{"claim": 0, "completion": 1}[stopWhen], map[string]string{"claim": "free", "completion": "done"}[stopWhen]
				if runs.Load() != wantRuns {
					t.Errorf("fn ran %d times, want %d", runs.Load(), wantRuns)
				}
				if stopWhen == "completion" && (string(r.res.Body) != "charged" || r.res.Degraded) {
					t.Errorf("Do = %+v; want fn's result, not degraded", r.res)
				}
				if st := recordState(t, ctx, testenv.NewRedisClient(t, rp.Primary.Addr()), "pay:order-1"); st != wantState {
					t.Errorf("the record is %q on the primary, want %q", st, wantState)
				}
				resume()
				rp.CaughtUp(t)
				res, err := s.Do(ctx, "pay:order-1", []byte("fp"), counted(&runs), idempotency.NoWait())
				if err != nil || string(res.Body) != "charged" || runs.Load() != 1 {
					t.Fatalf("the retry = %+v, %v with fn run %d times; want the result and one run in all", res, err, runs.Load())
				}
			})
		}
	}
}

// TestReplicaAcks_AResentCompletionWaitsAgainAndRunsFnOnce: the reply of
// the completed record's pipeline (finish.lua, touch, WAIT) is lost after
// it ran on the primary (the proxy drops it), and go-redis resends it
// after its 2 s read timeout. finish.lua finds its own finished record and
// writes nothing: the touch must make the resend's WAIT count the
// replicas that have the record. With the replica stopped Do returns fn's
// result with ErrNotReplicated, not a success; with it running, fn's
// result and the replica has the record. fn runs once in all.
func TestReplicaAcks_AResentCompletionWaitsAgainAndRunsFnOnce(t *testing.T) {
	t.Parallel()
	for _, stopped := range []bool{false, true} {
		t.Run(map[bool]string{false: "replica running", true: "replica stopped"}[stopped], func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := testenv.NewReplicated(t)
			c, px := replicaacktest.ResendingClient(t, rp)
			s := newStore(t, c, idempotency.WithReplicaAcks(1, ackTimeout))
			var runs atomic.Int32
			// Loads the scripts. A replica that does not acknowledge the
			// warm-up within ackTimeout on a loaded machine is not what
			// this test studies (the first pipeline used to hide it: a WAIT
			// behind NOSCRIPT gave the replica a timeout more, h114).
			if _, err := s.Do(ctx, "warm", nil, counted(&runs)); err != nil && !errors.Is(err, idempotency.ErrNotReplicated) {
				t.Fatal(err)
			}
			runs.Store(0)
			resume := func() {}
			var dropped <-chan struct{}
			res, err := s.Do(ctx, "pay:order-1", []byte("fp"), func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
				if stopped {
					resume = rp.PauseReplica(t) // after the claim was acknowledged
				}
				dropped = px.DropNextReply() // the completion's
				return counted(&runs)(ctx, a)
			})
			replicaacktest.WantDropped(t, dropped)
			switch {
			case stopped && (!errors.Is(err, idempotency.ErrNotReplicated) || string(res.Body) != "charged"):
				t.Fatalf("the resent completion with the replica stopped = %+v, %v; want fn's result with ErrNotReplicated", res, err)
			case !stopped && (err != nil || string(res.Body) != "charged" || res.Replayed):
				t.Fatalf("the resent completion = %+v, %v; want fn's result, first run", res, err)
			}
			resume()
			rp.CaughtUp(t)
			rp.ReplicaHas(t, "the completed record", func(c *redis.Client) bool { return recordState(t, ctx, c, "pay:order-1") == "done" })
			res, err = s.Do(ctx, "pay:order-1", []byte("fp"), counted(&runs))
			if err != nil || !res.Replayed || string(res.Body) != "charged" || runs.Load() != 1 {
				t.Fatalf("the retry = %+v, %v with fn run %d times; want the replay and one run", res, err, runs.Load())
			}
		})
	}
}
