package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// waitRecorder records the timeout argument (ms) of every WAIT sent
// through a client, alone or in a pipeline, and the commands of each
// pipeline that carried one.
type waitRecorder struct {
	passThrough
	mu     sync.Mutex
	ms     []int64
	before [][]string // per WAIT: the names of the commands before it in its pipeline
}

func (h *waitRecorder) record(cmds []redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, c := range cmds {
		if !strings.EqualFold(c.Name(), "wait") {
			continue
		}
		args := c.Args()
		ms, _ := strconv.ParseInt(strings.TrimSpace(toString(args[len(args)-1])), 10, 64)
		h.ms = append(h.ms, ms)
		var names []string
		for _, b := range cmds[:i] {
			names = append(names, strings.ToLower(b.Name()))
		}
		h.before = append(h.before, names)
	}
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

func (h *waitRecorder) sent() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int64(nil), h.ms...)
}

func (h *waitRecorder) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ms, h.before = nil, nil
}

func (h *waitRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *waitRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds)
		return next(ctx, cmds)
	}
}

// TestReplicaAcks_TheWaitSentFitsTheContextsDeadline: the caller's
// deadline (1.5 s) is below the WAIT timeout (2 s) and the replica is
// stopped. The WAIT sent must not wait longer than the context has left,
// so that its reply, not the context's deadline, ends the pipeline: with
// ContextTimeoutEnabled, a read cut by the deadline drops the connection;
// without it, nothing but the WAIT's own timeout bounds the read, and
// Acquire returned up to the whole WAIT timeout after its deadline. The
// Acquire fails as one whose deadline cut it (ErrNotAcquired and
// DeadlineExceeded, not a store failure), and the lock is given back.
func TestReplicaAcks_TheWaitSentFitsTheContextsDeadline(t *testing.T) {
	// Serial: asserts a deadline with sub-second slack, which parallel tests
	// beside it on a loaded 2-core machine overran (-parallel 4, a CPU burner).
	// Long enough that a stall of a loaded machine between the context's
	// start and the send does not end it before the WAIT is sent (the
	// ContextTimeoutEnabled=false cases then see the context's error, not
	// the counts), short enough that the WAIT (healthyAckTimeout, 2 s)
	// must be cut to fit it, less the 250 ms reply margin.
	const deadline = 1500 * time.Millisecond
	for _, m := range modes {
		for _, cte := range []bool{true, false} {
			t.Run(m.name+"/ContextTimeoutEnabled="+strconv.FormatBool(cte), func(t *testing.T) {
				ctx := timeout(t, 2*time.Minute)
				rp := newReplicated(t, ctx)
				h := &waitRecorder{}
				c := newClient(t, rp.primary.Addr(), func(o *redis.Options) {
					o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second
					o.ContextTimeoutEnabled = cte
				})
				c.AddHook(h)
				l := newLocker(t, c, append(m.opts, redislock.WithReplicaAcks(1, healthyAckTimeout))...)
				warmUp(t, ctx, l, instrument.FailFast())
				h.reset()
				rp.pauseReplica(t)

				const key = "lock:replica-acks-wait-fits-the-deadline"
				actx, cancel := context.WithTimeout(ctx, deadline)
				defer cancel()
				lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
				if err == nil {
					_ = lease.Release(ctx)
					t.Fatal("Acquire returned a lease no replica acknowledged")
				}
				sent := h.sent()
				if len(sent) == 0 {
					t.Fatalf("no WAIT sent (Acquire = %v)", err)
				}
				for _, ms := range sent {
					if time.Duration(ms)*time.Millisecond >= deadline {
						t.Fatalf("WAIT sent with timeout %dms under a context of %v: it outwaits the caller's deadline (all sent: %v)", ms, deadline, sent)
					}
				}
				if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Acquire = %v, want ErrNotAcquired and the context's deadline", err)
				}
				if storefail.Unavailable(err) {
					t.Fatalf("Acquire = %v: a store failure for Govern, but the caller's deadline cut the WAIT", err)
				}
				// Without ContextTimeoutEnabled only the WAIT's reply ends
				// the pipeline (with it, a reply later than the margin on a
				// loaded machine is cut by the deadline: the same error
				// without the counts): the error carries the counts and the
				// timeout the WAIT was sent with.
				if nre := (*redislock.NotReplicatedError)(nil); !cte && (!errors.As(err, &nre) || nre.Acked != 0 || nre.Wanted != 1 || nre.Timeout != time.Duration(sent[len(sent)-1])*time.Millisecond) {
					t.Fatalf("Acquire = %v, want a *NotReplicatedError of 0 of 1 within the %dms sent", err, sent[len(sent)-1])
				}
				testenv.WaitFor(t, giveBackWithin, "the give-back to end", func() bool {
					return redislock.PendingLeaves(l) == 0
				})
				if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
					t.Fatalf("the lock taken by the cut attempt is still on the primary (EXISTS %d)", n)
				}
			})
		}
	}
}

// TestReplicaAcks_NotReplicatedErrorCarriesTheCounts: the counts of a
// failed acknowledgement are data, not only text. With one healthy
// replica, an Acquire asking for two fails once the timeout has passed
// (WAIT answers 1); with the replica stopped, a Refresh asking for one
// fails (WAIT answers 0). Each error holds a *NotReplicatedError that
// errors.As finds with those counts and the timeout, that
// errors.Is(err, ErrNotReplicated) matches, and that Govern's
// store-failure policy reads as the store out of reach.
func TestReplicaAcks_NotReplicatedErrorCarriesTheCounts(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := newReplicated(t, ctx)
	check := func(what string, err error, want redislock.NotReplicatedError) {
		t.Helper()
		var nre *redislock.NotReplicatedError
		if !errors.As(err, &nre) {
			t.Fatalf("%s = %v, want a *NotReplicatedError", what, err)
		}
		if *nre != want {
			t.Fatalf("%s: %+v, want %+v", what, *nre, want)
		}
		say := fmt.Sprintf("%d of %d replicas acknowledged within %v", want.Acked, want.Wanted, want.Timeout)
		if !errors.Is(err, redislock.ErrNotReplicated) || !strings.Contains(err.Error(), say) {
			t.Fatalf("%s = %v, want ErrNotReplicated saying %q", what, err, say)
		}
		if !storefail.Unavailable(err) {
			t.Fatalf("%s = %v: not a store failure for Govern's store-failure policy", what, err)
		}
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	two := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.WithReplicaAcks(2, ackTimeout))
	lease, err := two.Acquire(actx, "lock:replica-acks-error-counts", instrument.WithTTL(time.Hour), instrument.FailFast())
	if err == nil {
		_ = lease.Release(ctx)
		t.Fatal("Acquire succeeded with 1 of 2 replicas")
	}
	check("Acquire asking for 2 of 1 replica", err, redislock.NotReplicatedError{Acked: 1, Wanted: 2, Timeout: ackTimeout})

	one := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.WithReplicaAcks(1, healthyAckTimeout))
	held, err := one.Acquire(actx, "lock:replica-acks-error-counts-refresh", instrument.WithTTL(time.Hour), instrument.FailFast(), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	rp.pauseReplica(t)
	check("Refresh with the replica stopped", held.Refresh(actx), redislock.NotReplicatedError{Acked: 0, Wanted: 1, Timeout: healthyAckTimeout})
}

// TestReplicaAcks_ARetryAfterARefusalWaitsForNoReplica: another caller
// holds the key, and an Acquire with acks retries four times. Each refused
// attempt wrote only the fence counter, whose replication no grant depends
// on (the next fence is at least the server clock, which covers a counter
// lost in a failover), yet its WAIT cost a replica round trip, and the
// whole timeout while replicas are down. Only the first attempt, which may
// well acquire, is followed by a WAIT: one WAIT in all, not four.
func TestReplicaAcks_ARetryAfterARefusalWaitsForNoReplica(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := newReplicated(t, ctx)
			const key = "lock:replica-acks-refused-retry"
			other, err := newLocker(t, newClient(t, rp.primary.Addr()), m.opts...).Acquire(ctx, key, instrument.WithTTL(time.Hour), instrument.FailFast(), instrument.WithoutWatchdog())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = other.Release(ctx) }()
			h := &waitRecorder{}
			c := ackClient(t, rp.primary.Addr())
			c.AddHook(h)
			l := newLocker(t, c, append(m.opts, redislock.WithReplicaAcks(1, healthyAckTimeout))...)
			lease, err := l.Acquire(ctx, key, instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 4))
			if err == nil {
				_ = lease.Release(ctx)
				t.Fatal("Acquire took a lock another caller holds")
			}
			if !errors.Is(err, instrument.ErrNotAcquired) {
				t.Fatalf("Acquire = %v, want ErrNotAcquired", err)
			}
			if sent := h.sent(); len(sent) != 1 {
				t.Fatalf("%d WAITs sent for four refused attempts, want 1 (the first attempt's)", len(sent))
			}
		})
	}
}

// releaseAfterFirstWait releases a lease once the first pipeline that
// carries a WAIT through its client has been answered, before the caller
// reads the answer: the Acquire that sent it finds the key held and its
// next attempt finds it free.
type releaseAfterFirstWait struct {
	passThrough
	once    sync.Once
	release func()
}

func (h *releaseAfterFirstWait) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *releaseAfterFirstWait) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if strings.EqualFold(c.Name(), "wait") {
				h.once.Do(h.release)
			}
		}
		return err
	}
}

// TestReplicaAcks_ARetryThatAcquiresIsConfirmedByAWait: with the replica
// stopped, an Acquire with acks finds the key held; the holder releases
// (a default Locker's Release, which also hands the lock to a queued Fair
// waiter) before the retry. The retry, sent without a WAIT, takes the lock
// (or finds it handed over) on the primary only: it must not be granted
// until an attempt followed by a WAIT confirms it, which no replica
// acknowledges. The Acquire fails with ErrNotReplicated and gives the
// lock back.
func TestReplicaAcks_ARetryThatAcquiresIsConfirmedByAWait(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := newReplicated(t, ctx)
			const key = "lock:replica-acks-retry-confirmed"
			other, err := newLocker(t, newClient(t, rp.primary.Addr()), m.opts...).Acquire(ctx, key, instrument.WithTTL(time.Hour), instrument.FailFast(), instrument.WithoutWatchdog())
			if err != nil {
				t.Fatal(err)
			}
			h := &waitRecorder{}
			c := ackClient(t, rp.primary.Addr())
			c.AddHook(h)
			c.AddHook(&releaseAfterFirstWait{release: func() {
				if err := other.Release(ctx); err != nil {
					t.Errorf("the holder's Release: %v", err)
				}
			}})
			l := newLocker(t, c, append(m.opts, redislock.WithReplicaAcks(1, ackTimeout))...)
			rp.pauseReplica(t)

			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 3))
			if err == nil {
				_ = lease.Release(ctx)
				t.Fatalf("Acquire granted (fence %d) a lock no replica acknowledged", lease.Fence())
			}
			if !errors.Is(err, redislock.ErrNotReplicated) {
				t.Fatalf("Acquire = %v, want ErrNotReplicated (WAITs sent: %v)", err, h.sent())
			}
			testenv.WaitFor(t, giveBackWithin, "the give-back of the unacknowledged lock", func() bool {
				return redislock.PendingLeaves(l) == 0
			})
			if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("the unacknowledged lock is still on the primary (EXISTS %d)", n)
			}
		})
	}
}

// TestReplicaAcks_AFlushedScriptCacheStillWaitsAfterTheEval: SCRIPT FLUSH
// (or a primary that never ran the scripts) makes the EVALSHA answer
// NOSCRIPT, and the script is sent again as EVAL. The WAIT that followed
// the EVALSHA counted a connection that wrote nothing: on a new
// connection it answers at once with every connected replica, a stopped
// one too. Only the WAIT after the EVAL says whether the lock was
// replicated: with the replica stopped, the Acquire must fail with
// ErrNotReplicated and give the lock back, and one WAIT must follow the
// EVAL.
func TestReplicaAcks_AFlushedScriptCacheStillWaitsAfterTheEval(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := newReplicated(t, ctx)
			rp.pauseReplica(t)
			if err := rp.cp.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			h := &waitRecorder{}
			c := ackClient(t, rp.primary.Addr()) // new connections: nothing written on them yet
			c.AddHook(h)
			l := newLocker(t, c, append(m.opts, redislock.WithReplicaAcks(1, ackTimeout))...)
			const key = "lock:replica-acks-noscript"
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
			if err == nil {
				_ = lease.Release(ctx)
				t.Fatalf("Acquire granted (fence %d) after NOSCRIPT although no replica acknowledged the EVAL's lock", lease.Fence())
			}
			if !errors.Is(err, redislock.ErrNotReplicated) {
				t.Fatalf("Acquire = %v, want ErrNotReplicated", err)
			}
			h.mu.Lock()
			before := append([][]string(nil), h.before...)
			h.mu.Unlock()
			if n := len(before); n == 0 || len(before[n-1]) == 0 || before[n-1][len(before[n-1])-1] != "eval" {
				t.Fatalf("the last WAIT does not follow the EVAL (commands before each WAIT: %v)", before)
			}
			testenv.WaitFor(t, giveBackWithin, "the give-back of the unacknowledged lock", func() bool {
				return redislock.PendingLeaves(l) == 0
			})
			if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("the unacknowledged lock is still on the primary (EXISTS %d)", n)
			}
		})
	}
}

// TestReplicaAcks_AReleaseLostInAFailoverLeavesTheLockToItsTTL: Release
// sends no WAIT. A holds a lock the replica acknowledged; replication is
// cut and A releases (nil: the primary deleted it). B then takes the lock
// on the primary, but its WAIT counts no replica: an acknowledged write
// after the release would have carried the release to the replica too
// (one replication stream, in order), an unacknowledged one is given
// back, so B fails with ErrNotReplicated. The primary dies and the replica,
// which never got the release, is promoted: it still holds A's released
// lock, C is refused while it lives, and gets it once its TTL has run
// out, with a fence above A's. Nobody held a lease at the same time as
// another: the release lost costs the TTL (liveness), not exclusion.
func TestReplicaAcks_AReleaseLostInAFailoverLeavesTheLockToItsTTL(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := newReplicated(t, ctx)
			const key = "lock:replica-acks-release-lost"
			const ttl = 3 * time.Second
			acks := append(m.opts, redislock.WithReplicaAcks(1, healthyAckTimeout))
			a, err := newLocker(t, ackClient(t, rp.primary.Addr()), acks...).Acquire(ctx, key, instrument.WithTTL(ttl), instrument.FailFast(), instrument.WithoutWatchdog())
			if err != nil {
				t.Fatal(err)
			}
			held := keyValue(t, ctx, rp.cr, key)
			if redislock.DecodeValue(held).Fence != a.Fence() {
				t.Fatalf("the replica does not hold A's acknowledged lock (%q)", held)
			}
			rp.link.Blackhole(true) // nothing written from now on reaches the replica
			if err := a.Release(ctx); err != nil {
				t.Fatalf("A's Release on the primary: %v", err)
			}

			bl := newLocker(t, ackClient(t, rp.primary.Addr()), acks...)
			b, err := bl.Acquire(ctx, key, instrument.WithTTL(time.Hour), instrument.FailFast(), instrument.WithoutWatchdog())
			if err == nil {
				_ = b.Release(ctx)
				t.Fatalf("B granted (fence %d) a lock whose write, and the release before it, no replica acknowledged", b.Fence())
			}
			if !errors.Is(err, redislock.ErrNotReplicated) {
				t.Fatalf("B's Acquire = %v, want ErrNotReplicated", err)
			}

			if err := rp.primary.Kill(); err != nil {
				t.Fatal(err)
			}
			promote(t, ctx, rp.cr)
			if got := keyValue(t, ctx, rp.cr, key); got != held {
				t.Fatalf("the promoted replica has %q, want A's released lock (the release never reached it)", got)
			}
			cl := newLocker(t, newClient(t, rp.replica.Addr()), m.opts...)
			c, err := cl.Acquire(ctx, key, instrument.FailFast())
			if err == nil {
				_ = c.Release(ctx)
				t.Fatal("C took the lock on the promoted replica while A's released lock lived there")
			}
			if !errors.Is(err, instrument.ErrNotAcquired) {
				t.Fatalf("C's Acquire = %v, want ErrNotAcquired", err)
			}
			var lease instrument.Lease
			testenv.WaitFor(t, giveBackWithin, "A's lock to expire on the promoted replica", func() bool {
				lease, err = cl.Acquire(ctx, key, instrument.FailFast())
				if err != nil && !errors.Is(err, instrument.ErrNotAcquired) {
					t.Fatalf("C's Acquire: %v", err)
				}
				return err == nil
			})
			defer func() { _ = lease.Release(ctx) }()
			if lease.Fence() <= a.Fence() {
				t.Fatalf("C's fence %d is not above A's %d", lease.Fence(), a.Fence())
			}
		})
	}
}
