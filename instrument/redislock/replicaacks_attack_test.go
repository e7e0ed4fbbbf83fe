package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_ASubMillisecondTimeoutStillBoundsTheWait: WAIT takes its
// timeout in whole milliseconds, and WAIT n 0 blocks until n replicas
// answer. A timeout New accepts (> 0, below the read timeout) but under a
// millisecond must not become WAIT n 0: with the replica stopped, the
// Acquire fails with ErrNotReplicated once the timeout (rounded up to the
// millisecond) has passed, not with the client's read timeout on a WAIT
// that never answers (after which go-redis resends the whole pipeline).
func TestReplicaAcks_ASubMillisecondTimeoutStillBoundsTheWait(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := newReplicated(t, ctx)
	l := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.WithReplicaAcks(1, 500*time.Microsecond))
	rp.pauseReplica(t)

	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	const key = "lock:replica-acks-sub-ms"
	lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
	if err == nil {
		_ = lease.Release(ctx)
		t.Fatal("Acquire succeeded although no replica acknowledged the lock")
	}
	if !errors.Is(err, redislock.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas acknowledged") {
		t.Fatalf("Acquire = %v, want ErrNotReplicated saying 0 of 1 replicas acknowledged (a WAIT with timeout 0 blocks until the read timeout)", err)
	}
	testenv.WaitFor(t, giveBackWithin, "the give-back of the unacknowledged lock to end", func() bool {
		return redislock.PendingLeaves(l) == 0
	})
	if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("the unacknowledged lock is still on the primary (EXISTS %d)", n)
	}
}

// dialGate holds every dial of its client while armed, until opened, and
// counts the dials it held.
type dialGate struct {
	mu     sync.Mutex
	gate   chan struct{} // nil: dials pass
	held   int
	passes chan struct{}
}

func (g *dialGate) arm() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *dialGate) open() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

func (g *dialGate) heldDials() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (g *dialGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		g.mu.Lock()
		gate := g.gate
		if gate != nil {
			g.held++
		}
		g.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return next(ctx, network, addr)
	}
}

func (g *dialGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *dialGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReplicaAcks_ALostReplyIsGrantedOnlyByTheResendsWait: the pipeline
// [acquire script, WAIT] runs, the replica acknowledges it, and its replies
// are lost; go-redis resends the whole pipeline on a new connection, whose
// dial is held until the test has decided the replica's fate. With the
// replica stopped meanwhile, the resend's script re-arms the lock (a write
// the stopped replica never acknowledges) and its WAIT counts 0: the
// Acquire fails with ErrNotReplicated and gives the lock back, although
// the first try's write was acknowledged (its answer was never read). With
// the replica healthy, the resend is granted with the first try's fence,
// and the replica holds the lock.
func TestReplicaAcks_ALostReplyIsGrantedOnlyByTheResendsWait(t *testing.T) {
	t.Parallel()
	for _, stop := range []bool{true, false} {
		name := map[bool]string{true: "replica-stopped-before-resend", false: "replica-healthy"}[stop]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := newReplicated(t, ctx)
			p := testenv.NewProxy(t, rp.primary.Addr())
			g := &dialGate{}
			// One connection: the resend must dial (the gate holds it).
			c := newClient(t, p.Addr(), func(o *redis.Options) {
				o.PoolSize = 1
				o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second
			})
			c.AddHook(g)
			// The warm-up needs a healthy replica's acknowledgement in time.
			l := newLocker(t, c, redislock.WithReplicaAcks(1, healthyAckTimeout))
			warmUp(t, ctx, l, instrument.FailFast())

			key := "lock:replica-acks-lost-reply-" + name
			g.arm()
			dropped := p.DropNextReply()
			type result struct {
				lease instrument.Lease
				err   error
			}
			done := make(chan result, 1)
			go func() {
				actx, cancel := context.WithTimeout(ctx, 45*time.Second)
				defer cancel()
				lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), instrument.FailFast(), instrument.WithoutWatchdog())
				done <- result{lease, err}
			}()
			select {
			case <-dropped:
			case res := <-done:
				t.Fatalf("Acquire returned (%v) before its reply was dropped", res.err)
			}
			// The first try ran on the primary; its replies are gone.
			if stop {
				rp.pauseReplica(t)
			}
			testenv.WaitFor(t, giveBackWithin, "the resend to dial", func() bool { return g.heldDials() > 0 })
			g.open()
			res := <-done
			if stop {
				if res.err == nil {
					_ = res.lease.Release(ctx)
					t.Fatalf("Acquire granted (fence %d) by a resend no replica acknowledged", res.lease.Fence())
				}
				if !errors.Is(res.err, redislock.ErrNotReplicated) {
					t.Fatalf("Acquire = %v, want ErrNotReplicated (the resend's WAIT counted no replica)", res.err)
				}
				testenv.WaitFor(t, giveBackWithin, "the give-back of the unacknowledged lock", func() bool {
					return redislock.PendingLeaves(l) == 0
				})
				if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
					t.Fatalf("the unacknowledged lock is still on the primary (EXISTS %d)", n)
				}
				return
			}
			if res.err != nil {
				t.Fatalf("Acquire after a lost reply, replica healthy: %v", res.err)
			}
			defer func() { _ = res.lease.Release(ctx) }()
			want := keyValue(t, ctx, rp.cp, key)
			if got := redislock.DecodeValue(want).Fence; got != res.lease.Fence() {
				t.Fatalf("the primary's lock has fence %d, the lease %d", got, res.lease.Fence())
			}
			if got := keyValue(t, ctx, rp.cr, key); got != want {
				t.Fatalf("the replica has %q, want the granted lock %q (WAIT acknowledged it)", got, want)
			}
		})
	}
}

// TestReplicaAcks_AContextShorterThanTheWaitGivesTheLockBack: the caller's
// deadline (300ms) is far below the WAIT timeout (2s) and the replica is
// stopped, so the deadline ends the Acquire while WAIT is still waiting: it
// fails as an Acquire whose context ended (ErrNotAcquired and the
// deadline), never with a lease, and the lock its script took on the
// primary is given back, so another caller takes it at once, not after its
// hour.
func TestReplicaAcks_AContextShorterThanTheWaitGivesTheLockBack(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, wait := range []struct {
			name string
			opt  instrument.AcquireOption
		}{{"fail-fast", instrument.FailFast()}, {"deadline", instrument.WaitUntilDeadline()}} {
			t.Run(m.name+"/"+wait.name, func(t *testing.T) {
				t.Parallel()
				ctx := timeout(t, 2*time.Minute)
				rp := newReplicated(t, ctx)
				l := newLocker(t, ackClient(t, rp.primary.Addr()), append(m.opts, redislock.WithReplicaAcks(1, healthyAckTimeout))...)
				warmUp(t, ctx, l, instrument.FailFast())
				rp.pauseReplica(t)

				const key = "lock:replica-acks-short-context"
				actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), wait.opt)
				if err == nil {
					_ = lease.Release(ctx)
					t.Fatal("Acquire returned a lease whose WAIT its context cut short")
				}
				if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Acquire = %v, want ErrNotAcquired and the context's deadline", err)
				}
				testenv.WaitFor(t, giveBackWithin, "the give-back to end", func() bool {
					return redislock.PendingLeaves(l) == 0
				})
				if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
					t.Fatalf("the lock taken by the cut attempt is still on the primary (EXISTS %d)", n)
				}
				other, err := newLocker(t, newClient(t, rp.primary.Addr()), m.opts...).Acquire(ctx, key, instrument.FailFast())
				if err != nil {
					t.Fatalf("another caller cannot take the lock after the give-back: %v", err)
				}
				_ = other.Release(ctx)
			})
		}
	}
}

// TestReplicaAcks_AHandoffNoReplicaAcknowledgesGrantsNobody: Fair mode,
// the replica stopped, two waiters of two Lockers queued behind a holder
// whose lock was acknowledged. The holder's release hands the lock to the
// first waiter (a release waits for no replica); its confirming attempt is
// not acknowledged, so it fails with ErrNotReplicated and its give-back
// hands the lock on to the second, which fails the same way: nobody gets a
// lease while no replica acknowledges, and the lock ends free with the
// queue empty. Once the replica is back a caller takes it.
func TestReplicaAcks_AHandoffNoReplicaAcknowledgesGrantsNobody(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := newReplicated(t, ctx)
	const key = "lock:replica-acks-fair-handoff"
	holder := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.Fair(), redislock.WithReplicaAcks(1, healthyAckTimeout))
	h, err := holder.Acquire(ctx, key, instrument.WithTTL(time.Hour), instrument.FailFast(), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	resume := rp.pauseReplica(t)

	type result struct {
		lease instrument.Lease
		err   error
	}
	var waiters []*redislock.Locker
	var results []chan result
	for i := range 2 {
		w := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.Fair(), redislock.WithReplicaAcks(1, 300*time.Millisecond))
		res := make(chan result, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			lease, err := w.Acquire(wctx, key, instrument.WithTTL(time.Hour), instrument.WithoutWatchdog())
			res <- result{lease, err}
		}()
		testenv.WaitFor(t, giveBackWithin, fmt.Sprintf("waiter %d to queue", i), func() bool {
			return rp.cp.LLen(ctx, queueKey(key)).Val() == int64(i+1)
		})
		waiters, results = append(waiters, w), append(results, res)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, res := range results {
		r := <-res
		if r.err == nil {
			_ = r.lease.Release(ctx)
			t.Fatalf("waiter %d got a lease (fence %d) no replica acknowledged", i, r.lease.Fence())
		}
		if !errors.Is(r.err, redislock.ErrNotReplicated) {
			t.Fatalf("waiter %d: %v, want ErrNotReplicated", i, r.err)
		}
	}
	for _, w := range waiters {
		testenv.WaitFor(t, giveBackWithin, "the waiters' give-backs to end", func() bool {
			return redislock.PendingLeaves(w) == 0
		})
	}
	if n := rp.cp.Exists(ctx, key, queueKey(key)).Val(); n != 0 {
		t.Fatalf("after both give-backs the lock or the queue is still there (EXISTS %d)", n)
	}
	resume()
	next := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.Fair(), redislock.WithReplicaAcks(1, healthyAckTimeout))
	testenv.WaitFor(t, giveBackWithin, "an acknowledged Acquire once the replica is back", func() bool {
		lease, err := next.Acquire(ctx, key, instrument.FailFast())
		if err != nil && !errors.Is(err, redislock.ErrNotReplicated) {
			t.Fatalf("Acquire after the replica came back: %v", err)
		}
		if err == nil {
			_ = lease.Release(ctx)
		}
		return err == nil
	})
}

// window is a span of time.
type window struct{ from, to time.Time }

// TestReplicaAcks_AFlappingReplicaNeverAcknowledgesAGrantMadeWhileStopped:
// the replica is stopped and resumed over and over (SIGSTOP/SIGCONT, for
// random spans) while four goroutines take locks on fresh keys and one
// refreshes a lease it holds. A grant or a successful Refresh whose call
// began after a stop and returned before the resume that followed wrote
// its lock while no replica could acknowledge it: there must be none. The
// stream must also see grants and ErrNotReplicated refusals both, so that
// it ran through both states.
func TestReplicaAcks_AFlappingReplicaNeverAcknowledgesAGrantMadeWhileStopped(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := newReplicated(t, ctx)
	l := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.WithReplicaAcks(1, 300*time.Millisecond))
	// The lease the stream refreshes, taken with a WAIT a healthy replica
	// answers in time on a loaded machine.
	first := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.WithReplicaAcks(1, healthyAckTimeout))
	held, err := first.Acquire(ctx, "lock:replica-acks-flap-held", instrument.WithTTL(time.Hour), instrument.FailFast(), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()

	var mu sync.Mutex
	var stopped []window // the replica stopped from..to
	var acked []window   // calls that returned success (grants, Refreshes)
	var grants, refused, refreshed int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	call := func(f func(context.Context) error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		from := time.Now()
		err := f(cctx)
		to := time.Now()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			acked = append(acked, window{from, to})
		case errors.Is(err, redislock.ErrNotReplicated):
			refused++
		default:
			t.Errorf("a call failed otherwise: %v", err)
		}
	}
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				call(func(cctx context.Context) error {
					lease, err := l.Acquire(cctx, fmt.Sprintf("lock:replica-acks-flap:%d:%d", w, i), instrument.WithTTL(time.Minute), instrument.FailFast(), instrument.WithoutWatchdog())
					if err == nil {
						mu.Lock()
						grants++
						mu.Unlock()
						_ = lease.Release(ctx)
					}
					return err
				})
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			call(func(cctx context.Context) error {
				err := held.Refresh(cctx)
				if err == nil {
					mu.Lock()
					refreshed++
					mu.Unlock()
				}
				return err
			})
		}
	})

	enough := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return grants > 0 && refused > 0 && refreshed > 0
	}
	// A stop counts from when the kernel shows the replica stopped (SIGSTOP
	// is delivered asynchronously), so that a window is never one in which
	// the replica could still run.
	stat := "/proc/" + infoField(t, ctx, rp.cr, "server", "process_id") + "/stat"
	isStopped := func() bool {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatalf("the replica's state: %v", err)
		}
		_, rest, _ := strings.Cut(string(b), ") ")
		return strings.HasPrefix(rest, "T")
	}
	for cycle := 0; cycle < 8 || (!enough() && cycle < 60); cycle++ {
		// Spans are the workload here, not synchronization.
		if err := rp.replica.Pause(); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, giveBackWithin, "the replica to stop", isStopped)
		from := time.Now()
		time.Sleep(time.Duration(50+rand.IntN(400)) * time.Millisecond)
		to := time.Now()
		if err := rp.replica.Resume(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		stopped = append(stopped, window{from, to})
		mu.Unlock()
		time.Sleep(time.Duration(50+rand.IntN(400)) * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	for _, a := range acked {
		for _, s := range stopped {
			if a.from.After(s.from) && a.to.Before(s.to) {
				t.Errorf("a call succeeded within a stop of the replica: called %v and returned %v after the stop, which lasted %v",
					a.from.Sub(s.from), a.to.Sub(s.from), s.to.Sub(s.from))
			}
		}
	}
	if !enough() {
		t.Fatalf("the stream did not see both states: %d grants, %d refreshes, %d refusals", grants, refreshed, refused)
	}
	t.Logf("%d grants, %d refreshes, %d refusals over %d stops", grants, refreshed, refused, len(stopped))
}
