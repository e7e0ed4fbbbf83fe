package redislock

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/internal/testenv"
)

// holdBatchReply holds the reply of every pipeline that carries two or more
// queued scripts and a WAIT (a combiner batch) after it was read, until
// release is closed or guard has passed; it says whether the guard ended a
// hold (held is then true).
type holdBatchReply struct {
	release chan struct{}
	guard   time.Duration
	held    atomic.Bool
}

func (h *holdBatchReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdBatchReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *holdBatchReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		scripts := 0
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				scripts++
			}
		}
		if scripts >= 2 && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "wait" }) {
			select {
			case <-h.release:
			case <-time.After(h.guard):
				h.held.Store(true)
			}
		}
		return err
	}
}

// TestReplicaAcks_ABatchedCallWithAnEarlierDeadlineDoesNotWaitForTheBatchsWait:
// the replica stopped, WithReplicaAcks(1, 4s), maxInFlight sends held on
// the wire, and queued behind them on one Locker: two acquires with a
// minute left, an acquire and a release with 4s left (an HTTP handler's
// deadline, shorter than the ack timeout plus the reply margin). The gate
// opens. The batch's WAIT (of the long acquires) runs to its 4s timeout and
// its reply, once read, is held by a hook until the short calls have
// returned: a short call that waits for that WAIT never returns while it
// is held, and the guard (20s) then ends the hold and fails the test. The
// short acquire must return on its own deadline, failing as an Acquire
// whose context ended (ErrNotAcquired, DeadlineExceeded, ErrNotReplicated;
// not a store failure), its lock given back; the short release, which
// asked for no WAIT, succeeds; the long acquires fail with ErrNotReplicated
// as a store failure (their WAIT was not cut).
func TestReplicaAcks_ABatchedCallWithAnEarlierDeadlineDoesNotWaitForTheBatchsWait(t *testing.T) {
	// Serial: asserts a deadline with sub-second slack, which parallel tests
	// beside it on a loaded 2-core machine overran (-parallel 4, a CPU burner).
	const ackTimeout = 4 * time.Second
	replica, c, _, h, recorded := ackedGatedCombiner(t, ackTimeout)
	hold := &holdBatchReply{release: make(chan struct{}), guard: 20 * time.Second}
	c.AddHook(hold)
	l, b := combinedLocker(t, c, WithReplicaAcks(1, ackTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The lock the short release gives back, taken while the replica
	// acknowledges.
	held, err := l.Acquire(ctx, "lock:batch-deadline:held", instrument.FailFast(), instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Resume() })

	direct := holdDirectSends(t, ctx, b)
	type result struct {
		lease instrument.Lease
		err   error
	}
	acquire := func(ctx context.Context, key string) <-chan result {
		out := make(chan result, 1)
		go func() {
			lease, err := l.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(time.Minute))
			out <- result{lease, err}
		}()
		return out
	}
	long0 := acquire(ctx, "lock:batch-deadline:long0")
	waitState(t, ctx, b, "the first long acquire queued", func() bool { return len(b.queue) == 1 })
	long1 := acquire(ctx, "lock:batch-deadline:long1")
	waitState(t, ctx, b, "the second long acquire queued", func() bool { return len(b.queue) == 2 })
	// Less than the ack timeout plus the reply margin: a WAIT of the full
	// timeout would outwait it. 4s is what a loaded machine may take to
	// open the gate (a call still queued at its deadline is never sent).
	sctx, scancel := context.WithTimeout(ctx, 4*time.Second)
	defer scancel()
	short := acquire(sctx, "lock:batch-deadline:short")
	waitState(t, ctx, b, "the short acquire queued", func() bool { return len(b.queue) == 3 })
	released := make(chan error, 1)
	go func() { released <- held.Release(sctx) }()
	waitState(t, ctx, b, "the short release queued", func() bool { return len(b.queue) == 4 })

	before := len(recorded())
	close(h.gate)
	s := <-short
	rerr := <-released
	close(hold.release)
	if hold.held.Load() {
		t.Fatalf("the short-deadline calls returned only after the batch's WAIT answered (its reply held %v): they waited for a WAIT cut by the batch's latest deadline, not their own", hold.guard)
	}
	for _, d := range direct {
		if err := (<-d).Err(); err != nil {
			t.Fatalf("a direct send: %v", err)
		}
	}
	if s.err == nil {
		_ = s.lease.Release(ctx)
		t.Fatal("the short acquire was granted with no replica acknowledging")
	}
	if !errors.Is(s.err, instrument.ErrNotAcquired) || !errors.Is(s.err, context.DeadlineExceeded) || !errors.Is(s.err, ErrNotReplicated) {
		t.Fatalf("short Acquire = %v, want ErrNotAcquired, DeadlineExceeded and ErrNotReplicated (its WAIT cut by its own deadline)", s.err)
	}
	if storefail.Unavailable(s.err) {
		t.Fatalf("short Acquire = %v: a store failure, want the caller's deadline", s.err)
	}
	if rerr != nil {
		t.Fatalf("short Release = %v, want nil (a release asks for no WAIT)", rerr)
	}
	for i, r := range []result{<-long0, <-long1} {
		if r.err == nil {
			_ = r.lease.Release(ctx)
			t.Fatalf("long acquire %d granted with no replica acknowledging", i)
		}
		if !errors.Is(r.err, ErrNotReplicated) || errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("long acquire %d = %v, want ErrNotReplicated, its WAIT not cut", i, r.err)
		}
	}
	// The long acquires left in one pipeline ending with one WAIT of the
	// full timeout; the short calls each on their own.
	var batches int
	for _, p := range recorded()[before:] {
		names := make([]string, len(p))
		for i, cmd := range p {
			names[i] = cmd.Name()
		}
		if slices.Equal(names, []string{"evalsha", "evalsha", "wait"}) {
			batches++
			if ms := p[2].Args()[2].(int64); ms != ackTimeout.Milliseconds() {
				t.Errorf("the batch's WAIT timeout %dms, want the ack timeout %v", ms, ackTimeout)
			}
		}
	}
	if batches != 1 {
		t.Errorf("%d batches of the two long acquires, want one", batches)
	}
	testenv.WaitFor(t, 30*time.Second, "the give-backs to end", func() bool { return l.pendingLeaves.Load() == 0 })
	for _, key := range []string{"lock:batch-deadline:short", "lock:batch-deadline:long0", "lock:batch-deadline:long1", "lock:batch-deadline:held"} {
		keys, _ := keysFor(key)
		if n := c.Exists(ctx, keys.lock).Val(); n != 0 {
			t.Errorf("%s is still held on the primary: a failed call's lock not given back", key)
		}
	}
}

// TestReplicaAcks_ABatchsWaitIsCutToItsEarliestDeadline: the batch's WAIT
// is computed when the batch goes out, which may be later than when it was
// formed (apart sent alone the calls whose deadline cut it then): its
// timeout is what the earliest deadline of its calls leaves, a call that
// asks for no WAIT included (it reads its reply after the WAIT's too), and
// only the acks of the calls whose own deadline cuts it are marked cut.
func TestReplicaAcks_ABatchsWaitIsCutToItsEarliestDeadline(t *testing.T) {
	// Serial: asserts a deadline with sub-second slack (see the test above).
	const ackTimeout = 4 * time.Second
	b := newCombiner(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), replicaAcks{n: 1, timeout: ackTimeout, set: true})
	t.Cleanup(func() { _ = b.c.Close() })
	long, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	short, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	var longAck, shortAck ackReply
	for _, tc := range []struct {
		name  string
		batch []*queued
	}{
		{"the short call asks for a WAIT", []*queued{{ctx: long, ack: &longAck}, {ctx: short, ack: &shortAck}}},
		{"the short call asks for none", []*queued{{ctx: long, ack: &longAck}, {ctx: short}}},
	} {
		longAck, shortAck = ackReply{}, ackReply{}
		wait, ms := b.batchWait(long, tc.batch)
		if wait == nil {
			t.Fatalf("%s: no WAIT", tc.name)
		}
		if limit := int64((2*time.Second - waitReplyMargin) / time.Millisecond); ms > limit || wait.Args()[2] != ms {
			t.Errorf("%s: WAIT %v (timeout %dms), want at most what the earliest deadline leaves, %dms", tc.name, wait.Args(), ms, limit)
		}
		if longAck.cut {
			t.Errorf("%s: the long call's ack marked cut: its own deadline did not cut the WAIT", tc.name)
		}
		if tc.batch[1].ack != nil && !shortAck.cut {
			t.Errorf("%s: the short call's ack not marked cut", tc.name)
		}
	}
	if wait, _ := b.batchWait(long, []*queued{{ctx: long}, {ctx: short}}); wait != nil {
		t.Errorf("a batch none of whose calls asks for a WAIT sends %v", wait.Args())
	}
}
