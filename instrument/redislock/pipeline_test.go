package redislock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// gateHook holds the INCRs of keys "direct:..." until gate is closed, and
// reports the size of every pipeline of INCRs (go-redis's own, such as a
// new connection's HELLO, pass untouched).
type gateHook struct {
	gate  chan struct{}
	pipes chan int
	// beforePipe, when set, runs before every pipeline is sent.
	beforePipe func(cmds []redis.Cmder)
	// onWrite, when set, sees every write to a connection dialled after it
	// was set, before the bytes go out.
	onWrite func(b []byte)
}

// writeHook is a connection that shows its writes to onWrite first.
type writeHook struct {
	net.Conn
	onWrite func(b []byte)
}

func (c writeHook) Write(b []byte) (int, error) {
	c.onWrite(b)
	return c.Conn.Write(b)
}

func isIncr(cmd redis.Cmder) bool { return cmd.Name() == "incr" }

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err != nil || h.onWrite == nil {
			return cn, err
		}
		return writeHook{Conn: cn, onWrite: h.onWrite}, nil
	}
}

func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if key, _ := cmd.Args()[len(cmd.Args())-1].(string); isIncr(cmd) && strings.HasPrefix(key, "direct:") {
			<-h.gate
		}
		return next(ctx, cmd)
	}
}

func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, isIncr) {
			h.pipes <- len(cmds)
		}
		if h.beforePipe != nil {
			h.beforePipe(cmds)
		}
		return next(ctx, cmds)
	}
}

// gatedCombiner is a combiner on a private redis-server whose first
// maxInFlight sends (INCRs of "direct:..." keys) wait for the returned gate, so that tests decide what
// is queued when they finish.
func gatedCombiner(t *testing.T) (*testenv.Redis, *redis.Client, *combiner, *gateHook) {
	t.Helper()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true, MaxRetries: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	h := &gateHook{gate: make(chan struct{}), pipes: make(chan int, 16)}
	c.AddHook(h)
	return r, c, newCombiner(c, replicaAcks{}), h
}

// combinedLocker is a Locker on c (closed when t ends) and the combiner
// of its one node.
func combinedLocker(t *testing.T, c redis.UniversalClient, opts ...Option) (*Locker, *combiner) {
	t.Helper()
	l, err := New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, l.store.(node).send
}

// waitState polls the combiner until cond holds (under its lock).
func waitState(t *testing.T, ctx context.Context, b *combiner, what string, cond func() bool) {
	t.Helper()
	for {
		b.mu.Lock()
		ok := cond()
		b.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// incr sends INCR key through b on its own goroutine; the result arrives on
// the returned channel.
func incr(ctx context.Context, b *combiner, key string) <-chan *redis.IntCmd {
	out := make(chan *redis.IntCmd, 1)
	go func() {
		cmd := redis.NewIntCmd(ctx, "incr", key)
		_ = b.Process(ctx, cmd)
		out <- cmd
	}()
	return out
}

// holdDirectSends starts maxInFlight calls, which gatedCombiner's gate holds
// on the wire, and returns once the combiner counts them in flight: the
// calls that follow queue.
func holdDirectSends(t *testing.T, ctx context.Context, b *combiner) []<-chan *redis.IntCmd {
	t.Helper()
	var out []<-chan *redis.IntCmd
	for i := range maxInFlight {
		out = append(out, incr(ctx, b, fmt.Sprintf("direct:%d", i)))
	}
	waitState(t, ctx, b, "the direct sends", func() bool { return b.inFlight == maxInFlight })
	return out
}

// TestCombiner_QueuedCallsGoOutAsOnePipeline: while maxInFlight sends are
// under way, ten more calls queue; the first send to finish sends all ten
// as one pipeline, and every call gets its own reply.
func TestCombiner_QueuedCallsGoOutAsOnePipeline(t *testing.T) {
	t.Parallel()
	_, c, b, h := gatedCombiner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := holdDirectSends(t, ctx, b)
	for i := range 10 {
		results = append(results, incr(ctx, b, fmt.Sprintf("queued:%d", i)))
	}
	waitState(t, ctx, b, "ten queued calls", func() bool { return len(b.queue) == 10 })
	close(h.gate)
	for i, r := range results {
		cmd := <-r
		if n, err := cmd.Result(); err != nil || n != 1 {
			t.Errorf("call %d (%v): %d, %v; want 1", i, cmd.Args(), n, err)
		}
	}
	select {
	case n := <-h.pipes:
		if n != 10 {
			t.Fatalf("a pipeline of %d commands, want the ten queued calls in one", n)
		}
	default:
		t.Fatal("no pipeline: the queued calls went out one by one")
	}
	select {
	case n := <-h.pipes:
		t.Fatalf("a second pipeline of %d commands", n)
	default:
	}
	waitState(t, ctx, b, "the combiner idle", func() bool { return b.inFlight == 0 && len(b.queue) == 0 })
	for i := range 10 {
		if v, err := c.Get(ctx, fmt.Sprintf("queued:%d", i)).Int(); err != nil || v != 1 {
			t.Fatalf("queued:%d = %d, %v: a command ran other than once", i, v, err)
		}
	}
}

// TestCombiner_CancelledWhileQueuedIsNeverSent: a queued call whose
// context ends returns the context's error at once and its command never
// reaches the server; the calls queued with it are unaffected.
func TestCombiner_CancelledWhileQueuedIsNeverSent(t *testing.T) {
	t.Parallel()
	_, c, b, h := gatedCombiner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct := holdDirectSends(t, ctx, b)
	gone, leave := context.WithCancel(ctx)
	left := incr(gone, b, "gone")
	kept := incr(ctx, b, "kept")
	waitState(t, ctx, b, "two queued calls", func() bool { return len(b.queue) == 2 })
	leave()
	if err := (<-left).Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call returned %v, want context.Canceled", err)
	}
	waitState(t, ctx, b, "the cancelled call out of the queue", func() bool { return len(b.queue) == 1 })
	close(h.gate)
	for _, r := range append(direct, kept) {
		if n, err := (<-r).Result(); err != nil || n != 1 {
			t.Fatalf("%d, %v; want 1", n, err)
		}
	}
	if err := c.Get(ctx, "gone").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET gone: %v; the cancelled call's command was sent", err)
	}
	waitState(t, ctx, b, "the combiner idle", func() bool { return b.inFlight == 0 && len(b.queue) == 0 })
}

// TestCombiner_FailedBatchFailsEveryCall: the server dies while calls are
// queued; every call, sent alone or in the batch, returns an error, none
// waits past the client's timeouts, and none reads as a success.
func TestCombiner_FailedBatchFailsEveryCall(t *testing.T) {
	t.Parallel()
	r, _, b, h := gatedCombiner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := holdDirectSends(t, ctx, b)
	for i := range 5 {
		results = append(results, incr(ctx, b, fmt.Sprintf("queued:%d", i)))
	}
	waitState(t, ctx, b, "five queued calls", func() bool { return len(b.queue) == 5 })
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	close(h.gate)
	for i, res := range results {
		select {
		case cmd := <-res:
			if cmd.Err() == nil {
				t.Errorf("call %d succeeded (%d) against a dead server", i, cmd.Val())
			}
		case <-ctx.Done():
			t.Fatalf("call %d still waiting: %v", i, ctx.Err())
		}
	}
	waitState(t, ctx, b, "the combiner idle", func() bool { return b.inFlight == 0 && len(b.queue) == 0 })
}

// TestCombiner_ManyCallers: 32 goroutines, 200 INCRs each on keys of their
// own through one combiner; every reply is the count so far, and the
// combiner ends idle. Run under -race this is the check that the queue
// handoff shares no state unguarded.
func TestCombiner_ManyCallers(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	b := newCombiner(c, replicaAcks{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Go(func() {
			key := fmt.Sprintf("many:%d", g)
			for i := 1; i <= 200; i++ {
				cmd := redis.NewIntCmd(ctx, "incr", key)
				if err := b.Process(ctx, cmd); err != nil {
					errs <- err
					return
				}
				if cmd.Val() != int64(i) {
					errs <- fmt.Errorf("%s: INCR #%d returned %d", key, i, cmd.Val())
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitState(t, ctx, b, "the combiner idle", func() bool { return b.inFlight == 0 && len(b.queue) == 0 })
}

// TestLocker_PipelineWhoseRepliesAreLostIsRetriedSafely attacks what the
// package doc says of batches: go-redis re-sends a pipeline whose replies
// were lost after its scripts ran, and the scripts must take that as they
// take any retry. Five acquires queue behind two held sends and leave as one
// pipeline; a proxy lets the scripts run and drops their replies; the retry
// on a new connection finds each lock already its caller's. Each Acquire
// gets the lock with the fence its first try wrote. Then five releases do
// the same: each is a release, not a loss, and every key is gone.
func TestLocker_PipelineWhoseRepliesAreLostIsRetriedSafely(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: 2,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	admin := testenv.NewRedisClient(t, r.Addr())
	var dropped atomic.Int32
	var armed, armWrite atomic.Bool
	var directDone chan struct{} // closed once the held sends have their replies
	h := &gateHook{pipes: make(chan int, 16),
		beforePipe: func(cmds []redis.Cmder) {
			if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "evalsha" }) && armed.CompareAndSwap(true, false) {
				// The proxy drops the next reply any connection carries: arm
				// it only once no other reply is on its way, and only as the
				// pipeline's own bytes go out (not a new connection's set-up).
				<-directDone
				armWrite.Store(true)
			}
		},
		onWrite: func(b []byte) {
			if bytes.Contains(b, []byte("evalsha")) && armWrite.CompareAndSwap(true, false) {
				p.DropNextReply()
				dropped.Add(1)
			}
		},
	}
	c.AddHook(h)
	l, b := combinedLocker(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Load the scripts first: the dropped replies must be the scripts', not
	// NOSCRIPT errors that go-redis answers with EVAL.
	warm, err := l.Acquire(ctx, "lock:warm", instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	const n = 5
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("lock:lost-batch:%d", i)
	}
	// batch runs call(i) for every key on its own goroutine while two held
	// sends keep the combiner full, so that the five calls queue and leave
	// as one pipeline whose replies the proxy drops.
	evalshas := func() int64 {
		info, err := admin.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
				var calls int64
				if _, err := fmt.Sscan(strings.SplitN(rest, ",", 2)[0], &calls); err != nil {
					t.Fatal(err)
				}
				return calls
			}
		}
		return 0
	}
	batch := func(what string, call func(i int) error) []error {
		before := evalshas()
		defer func() {
			// Every script ran twice: the first try, whose replies were
			// dropped, and go-redis's resend of the whole pipeline.
			if got := evalshas() - before; got != 2*n {
				t.Fatalf("%s: %d EVALSHAs ran, want %d (each call's script, then its resend)", what, got, 2*n)
			}
		}()
		h.gate, directDone = make(chan struct{}), make(chan struct{})
		direct := holdDirectSends(t, ctx, b)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { errs[i] = call(i) })
		}
		waitState(t, ctx, b, "five queued "+what, func() bool { return len(b.queue) == n })
		armed.Store(true)
		close(h.gate)
		for _, d := range direct {
			if err := (<-d).Err(); err != nil {
				t.Fatalf("held send: %v", err)
			}
		}
		close(directDone)
		wg.Wait()
		return errs
	}
	leases := make([]instrument.Lease, n)
	for i, err := range batch("acquires", func(i int) error {
		var err error
		leases[i], err = l.Acquire(ctx, keys[i], instrument.FailFast())
		return err
	}) {
		if err != nil {
			t.Fatalf("Acquire(%s) after its pipeline's replies were lost: %v", keys[i], err)
		}
	}
	if dropped.Load() != 1 {
		t.Fatalf("%d pipelines had their replies dropped, want the acquires' one", dropped.Load())
	}
	for i, key := range keys {
		v, err := admin.Get(ctx, key).Result()
		if err != nil {
			t.Fatalf("GET %s: %v: the retried acquire does not hold the lock", key, err)
		}
		if want := fmt.Sprintf(" %d ", leases[i].Fence()); !strings.Contains(v, want) {
			t.Fatalf("%s = %q; the lease's fence %d is not the one the first try wrote", key, v, leases[i].Fence())
		}
	}
	for i, err := range batch("releases", func(i int) error { return leases[i].Release(ctx) }) {
		if err != nil {
			t.Fatalf("Release(%s) after its pipeline's replies were lost: %v", keys[i], err)
		}
	}
	if dropped.Load() != 2 {
		t.Fatalf("%d pipelines had their replies dropped, want 2", dropped.Load())
	}
	if n, err := admin.Exists(ctx, keys...).Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS after the releases: %d, %v", n, err)
	}
}
