package redislock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_CallsSentApartFromABatchEndTheirSendOnce attacks the
// combiner's count of sends in flight now that finish sends some calls of a
// batch alone (apart: their deadline would cut the batch's WAIT), each one
// send more. Primary + replica, WithReplicaAcks(1, 1s), the replica stopped
// and resumed at random (FlapReplica) throughout; 24 goroutines on one
// Locker acquire and release 8 contended keys, each call's deadline either
// under the ack timeout plus the reply margin (sent alone from a batch) or
// a minute (kept in it), some callers cancelling mid-flight. Every call
// must return (the test's context bounds them: a count that never drops
// stalls every later call in the queue forever). Once they and the
// background give-backs have ended, the count must be exactly zero and the
// queue empty: a send whose finish never ran leaves it above zero, a finish
// run twice below, which lets every later call bypass the combiner. Then,
// the replica healthy, the Locker must still batch: maxInFlight sends held
// on the wire, two acquires with a minute queue and go out as one pipeline
// of both scripts and one WAIT, and both are granted.
func TestReplicaAcks_CallsSentApartFromABatchEndTheirSendOnce(t *testing.T) {
	t.Parallel()
	const ackTimeout = time.Second
	replica, c, _, h, recorded := ackedGatedCombiner(t, ackTimeout)
	l, b := combinedLocker(t, c, WithReplicaAcks(1, ackTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	stop := make(chan struct{})
	flapped := (&testenv.Replicated{Replica: replica}).FlapReplica(t, stop)
	var (
		mu       sync.Mutex
		maxSends int // the most sends seen under way (above maxInFlight: calls sent apart)
		outcomes = map[string]int{}
	)
	watchDone := make(chan struct{})
	go func() { // observes the count (for the log); decides nothing
		defer close(watchDone)
		for {
			b.mu.Lock()
			n := b.inFlight
			b.mu.Unlock()
			mu.Lock()
			maxSends = max(maxSends, n)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	note := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			what += " failed"
		}
		outcomes[what]++
	}
	// callCtx is a call's context: short (sent apart from a batch), long
	// (kept in it), or long and cancelled at a random moment.
	callCtx := func(rng *rand.Rand) (context.Context, context.CancelFunc) {
		switch rng.IntN(3) {
		case 0:
			return context.WithTimeout(ctx, time.Duration(50+rng.IntN(1100))*time.Millisecond)
		case 1:
			return context.WithTimeout(ctx, time.Minute)
		default:
			cctx, ccancel := context.WithTimeout(ctx, time.Minute)
			tm := time.AfterFunc(time.Duration(rng.IntN(300))*time.Millisecond, ccancel)
			return cctx, func() { tm.Stop(); ccancel() }
		}
	}
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 96))
			for i := range 25 {
				key := fmt.Sprintf("lock:inflight:%d", (g+i)%8)
				actx, acancel := callCtx(rng)
				lease, err := l.Acquire(actx, key, instrument.FailFast(), instrument.WithTTL(10*time.Second))
				acancel()
				note("acquire", err)
				if err != nil {
					continue
				}
				rctx, rcancel := callCtx(rng)
				note("release", lease.Release(rctx))
				rcancel()
			}
		})
	}
	allReturned := make(chan struct{})
	go func() { wg.Wait(); close(allReturned) }()
	select {
	case <-allReturned:
	case <-ctx.Done():
		b.mu.Lock()
		n, q := b.inFlight, len(b.queue)
		b.mu.Unlock()
		close(stop)
		<-flapped
		<-watchDone
		t.Fatalf("calls still waiting after %v: %d sends counted in flight, %d queued", 3*time.Minute, n, q)
	}
	close(stop)
	<-flapped
	<-watchDone
	mu.Lock()
	t.Logf("outcomes %v; at most %d sends under way", outcomes, maxSends)
	mu.Unlock()

	testenv.WaitFor(t, 30*time.Second, "the give-backs to end", func() bool { return l.pendingLeaves.Load() == 0 })
	b.mu.Lock()
	n, q := b.inFlight, len(b.queue)
	b.mu.Unlock()
	if n != 0 || q != 0 {
		t.Fatalf("every call returned, yet the combiner counts %d sends in flight and %d queued calls, want 0 and 0", n, q)
	}

	// The replica healthy again: the Locker still batches and answers.
	testenv.WaitFor(t, 30*time.Second, "the replica to acknowledge again", func() bool {
		return c.Wait(ctx, 1, 100*time.Millisecond).Val() == 1
	})
	direct := holdDirectSends(t, ctx, b)
	type result struct {
		lease instrument.Lease
		err   error
	}
	var after []chan result
	for i := range 2 {
		out := make(chan result, 1)
		after = append(after, out)
		go func() {
			lease, err := l.Acquire(ctx, fmt.Sprintf("lock:inflight:after%d", i), instrument.FailFast())
			out <- result{lease, err}
		}()
		waitState(t, ctx, b, "a follow-up acquire queued", func() bool { return len(b.queue) == i+1 })
	}
	before := len(recorded())
	close(h.gate)
	for _, d := range direct {
		if err := (<-d).Err(); err != nil {
			t.Fatalf("a direct send: %v", err)
		}
	}
	for i, out := range after {
		r := <-out
		if r.err != nil {
			t.Fatalf("follow-up acquire %d: %v", i, r.err)
		}
		if err := r.lease.Release(ctx); err != nil {
			t.Fatalf("follow-up release %d: %v", i, err)
		}
	}
	batched := slices.ContainsFunc(recorded()[before:], func(p []redis.Cmder) bool {
		names := make([]string, len(p))
		for i, cmd := range p {
			names[i] = cmd.Name()
		}
		return slices.Equal(names, []string{"evalsha", "evalsha", "wait"})
	})
	if !batched {
		t.Error("the two queued follow-up acquires did not go out as one batch")
	}
	waitState(t, ctx, b, "the follow-up sends to end", func() bool { return b.inFlight == 0 && len(b.queue) == 0 })
}
