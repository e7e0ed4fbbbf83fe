package redislock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// scriptHook calls on before every script call (EVALSHA/EVAL) on a client.
type scriptHook struct {
	on func(ctx context.Context) error
}

func (scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			if err := h.on(ctx); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}
func (scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestQuorumReview_NodeTimeoutIsNotReadAsTheCallersDeadline: every node
// blackholed, the caller's context alive (its deadline minutes away): the
// store failure must not say context.DeadlineExceeded, which callers (and
// tooFew's own doc: "ErrNotAcquired with the context's error") read as
// their own deadline. A single Redis blackholed gives "i/o timeout", not
// DeadlineExceeded.
func TestQuorumReview_NodeTimeoutIsNotReadAsTheCallersDeadline(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 3)
	cs := make([]redis.UniversalClient, 3)
	for i, n := range nodes {
		p := testenv.NewProxy(t, n.Addr())
		p.Blackhole(true)
		c := newClient(t, p.Addr())
		o := c.Options()
		o.ReadTimeout, o.WriteTimeout = time.Minute, time.Minute
		c = redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	l := newQuorumOn(t, cs, redislock.WithNodeTimeout(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := l.Acquire(ctx, "lock:review:dl", instrument.WithTTL(time.Hour))
	if err == nil || errors.Is(err, instrument.ErrNotAcquired) || !storefail.Unavailable(err) {
		t.Fatalf("err = %v; want a transport failure", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("caller's context ended: %v", ctx.Err())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("store failure with the caller's context alive: errors.Is(err, context.DeadlineExceeded) = true: %v", err)
	}
}

// TestQuorumReview_CallerCancelledAsTheNodesTimeOut: the caller's context
// is cancelled by the node calls themselves, each then failing as a node
// timeout would: the caller gave up, so ErrNotAcquired, never a transport
// failure. The other way round (nothing cancelled): a transport failure.
func TestQuorumReview_CallerCancelledAsTheNodesTimeOut(t *testing.T) {
	t.Parallel()
	for _, cancelCaller := range []bool{true, false} {
		t.Run(map[bool]string{true: "caller-cancelled", false: "node-timeout-only"}[cancelCaller], func(t *testing.T) {
			t.Parallel()
			nodes := quorumNodes(t, 3)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			gaveUp := errors.New("caller gave up")
			cs := make([]redis.UniversalClient, 3)
			for i, n := range nodes {
				c := newClient(t, n.Addr())
				c.AddHook(scriptHook{on: func(nctx context.Context) error {
					if cancelCaller {
						cancel(gaveUp)
					}
					return context.DeadlineExceeded
				}})
				cs[i] = c
			}
			l := newQuorumOn(t, cs)
			_, err := l.Acquire(ctx, "lock:review:cancel", instrument.WithTTL(time.Hour))
			if cancelCaller {
				if !errors.Is(err, instrument.ErrNotAcquired) || storefail.Unavailable(err) || !errors.Is(err, gaveUp) {
					t.Errorf("err = %v; want ErrNotAcquired with the caller's cause, no transport failure", err)
				}
				return
			}
			if errors.Is(err, instrument.ErrNotAcquired) || !storefail.Unavailable(err) {
				t.Errorf("err = %v; want a transport failure", err)
			}
		})
	}
}

// TestQuorumReview_WaitersSeeTheMajorityGoMidWait: a waiter (deadline,
// retry) polls a lock another owner holds on every node; two nodes are
// then killed. Acquire returns the transport failure before the deadline,
// as the doc says (not ErrNotAcquired at the deadline).
func TestQuorumReview_WaitersSeeTheMajorityGoMidWait(t *testing.T) {
	t.Parallel()
	for _, wait := range []string{"deadline", "retry"} {
		t.Run(wait, func(t *testing.T) {
			t.Parallel()
			nodes := quorumNodes(t, 3)
			admins := quorumClients(t, nodes)
			const key = "lock:review:wait"
			bg := context.Background()
			for _, a := range admins {
				if err := a.Set(bg, key, "someone-else 1 {}", time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var calls atomic.Int64
			cs := quorumClients(t, nodes)
			cs[2].AddHook(scriptHook{on: func(context.Context) error { calls.Add(1); return nil }})
			l := newQuorumOn(t, cs)
			ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
			defer cancel()
			opt := instrument.WaitUntilDeadline()
			if wait == "retry" {
				opt = instrument.Retry(instrument.ConstantBackoff(5*time.Millisecond), 1_000_000)
			}
			done := make(chan error, 1)
			go func() {
				_, err := l.Acquire(ctx, key, instrument.WithTTL(time.Hour), opt)
				done <- err
			}()
			testenv.WaitFor(t, time.Minute, "two attempts", func() bool { return calls.Load() >= 2 })
			for _, n := range nodes[:2] {
				if err := n.Kill(); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(90 * time.Second):
				t.Fatal("Acquire did not return")
			}
			if ctx.Err() != nil || errors.Is(err, instrument.ErrNotAcquired) || !storefail.Unavailable(err) {
				t.Errorf("err = %v (ctx %v); want a transport failure before the deadline", err, ctx.Err())
			}
		})
	}
}

// TestQuorumReview_LostGrantBesideTwoNodesOutOfReachIsGivenBack: node 0
// grants, its reply lost; nodes 1 and 2 are killed. Acquire fails with the
// transport failure, and node 0's grant (TTL an hour) is given back in the
// background.
func TestQuorumReview_LostGrantBesideTwoNodesOutOfReachIsGivenBack(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 3)
	admins := quorumClients(t, nodes)
	p := testenv.NewProxy(t, nodes[0].Addr())
	cs := quorumClients(t, nodes)
	c0 := newClient(t, p.Addr())
	o := c0.Options()
	o.MaxRetries = -1 // the lost reply is not resent
	c0 = redis.NewClient(o)
	t.Cleanup(func() { _ = c0.Close() })
	cs[0] = c0
	l := newQuorumOn(t, cs, redislock.WithNodeTimeout(300*time.Millisecond))
	const key = "lock:review:lost"
	bg := context.Background()
	for _, n := range nodes[1:] {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	p.DropNextReply()
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	_, err := l.Acquire(ctx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
	if errors.Is(err, instrument.ErrNotAcquired) || !storefail.Unavailable(err) {
		t.Fatalf("err = %v; want a transport failure", err)
	}
	testenv.WaitFor(t, time.Minute, "node 0's lost grant to be given back", func() bool {
		return admins[0].Exists(bg, key).Val() == 0
	})
}
