package redislock_test

import (
	"context"
	"errors"
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

// ackTimeout is the WAIT timeout where no replica acknowledges: short,
// since a stopped replica costs every write the whole of it.
// healthyAckTimeout is the WAIT timeout where a healthy replica must
// acknowledge: long enough for a loaded 2-core machine to schedule the
// replica, through a client whose read timeout leaves room for it
// (ackClient).
const (
	ackTimeout        = 500 * time.Millisecond
	healthyAckTimeout = 2 * time.Second
)

// ackClient is newClient with a read timeout above healthyAckTimeout (a
// pipeline's WAIT reply is read within it).
func ackClient(t *testing.T, addr string) *redis.Client {
	return newClient(t, addr, func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second })
}

// replicated is a primary and a replica of it, in sync, the replica
// reading the primary through link (Blackhole cuts replication).
type replicated struct {
	primary, replica *testenv.Redis
	link             *testenv.Proxy
	cp, cr           *redis.Client
}

func newReplicated(t *testing.T, ctx context.Context) replicated {
	t.Helper()
	// No delay before the full sync the replica asks for (default 5s).
	primary := testenv.NewRedis(t, testenv.WithRedisArgs("--repl-diskless-sync-delay", "0"))
	link := testenv.NewProxy(t, primary.Addr())
	_, port, _ := strings.Cut(link.Addr(), ":")
	replica := testenv.NewRedis(t, testenv.WithRedisArgs("--replicaof", "127.0.0.1", port))
	rp := replicated{primary: primary, replica: replica, link: link, cp: newClient(t, primary.Addr()), cr: newClient(t, replica.Addr())}
	testenv.WaitFor(t, giveBackWithin, "the replica to sync", func() bool {
		return infoField(t, ctx, rp.cr, "replication", "master_link_status") == "up"
	})
	// After a diskless sync the primary counts the replica (WAIT does) only
	// once it has acknowledged an offset, which it does once a second: a
	// WAIT of this connection, which wrote nothing, says when.
	testenv.WaitFor(t, giveBackWithin, "the primary to count the replica online", func() bool {
		return rp.cp.Wait(ctx, 1, 50*time.Millisecond).Val() == 1
	})
	return rp
}

// pauseReplica stops the replica (SIGSTOP) until the test ends or resume
// is called: connected, it acknowledges nothing.
func (rp replicated) pauseReplica(t *testing.T) (resume func()) {
	t.Helper()
	if err := rp.replica.Pause(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := rp.replica.Resume(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// TestReplicaAcks_AcquireUnacknowledgedFailsAndGivesTheLockBack: with the
// only replica stopped, an Acquire that asks for one acknowledgement takes
// the lock on the primary, hears from WAIT that no replica has it, and
// fails with ErrNotReplicated (saying how many acknowledged, a store
// failure for Govern); the lock it took is given back, so another caller
// takes it at once instead of waiting out its TTL (an hour).
func TestReplicaAcks_AcquireUnacknowledgedFailsAndGivesTheLockBack(t *testing.T) {
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
				l := newLocker(t, newClient(t, rp.primary.Addr()), append(m.opts, redislock.WithReplicaAcks(1, ackTimeout))...)
				const key = "lock:replica-acks-unacknowledged"
				rp.pauseReplica(t)

				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), wait.opt)
				if err == nil {
					_ = lease.Release(ctx)
					t.Fatal("Acquire succeeded although no replica acknowledged the lock")
				}
				if !errors.Is(err, redislock.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas acknowledged") {
					t.Fatalf("Acquire = %v, want ErrNotReplicated saying 0 of 1 replicas acknowledged", err)
				}
				if errors.Is(err, instrument.ErrNotAcquired) {
					t.Fatalf("Acquire = %v: ErrNotAcquired says the lock is held, which it is not", err)
				}
				if !storefail.Unavailable(err) {
					t.Fatalf("Acquire = %v: not a store failure for Govern's store-failure policy", err)
				}
				testenv.WaitFor(t, giveBackWithin, "the give-back of the unacknowledged lock to end", func() bool {
					return redislock.PendingLeaves(l) == 0
				})
				if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
					t.Fatalf("the unacknowledged lock is still on the primary (EXISTS %d)", n)
				}
				other, err := newLocker(t, newClient(t, rp.primary.Addr()), m.opts...).Acquire(ctx, key, instrument.FailFast())
				if err != nil {
					t.Fatalf("another caller cannot take the lock after the give-back: %v", err)
				}
				if err := other.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestReplicaAcks_AcquiredLockSurvivesFailover: with the replica healthy,
// an Acquire asking for one acknowledgement returns only once the replica
// has the lock. Replication is then cut, the primary killed and the replica
// promoted (as Sentinel does): the promoted replica holds the lock under
// the holder's value, and nobody else can take it.
func TestReplicaAcks_AcquiredLockSurvivesFailover(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := newReplicated(t, ctx)
			l := newLocker(t, ackClient(t, rp.primary.Addr()), append(m.opts, redislock.WithReplicaAcks(1, healthyAckTimeout))...)
			const key = "lock:replica-acks-failover"
			lease, err := l.Acquire(ctx, key, instrument.WithTTL(time.Hour), instrument.FailFast(), instrument.WithoutWatchdog())
			if err != nil {
				t.Fatal(err)
			}
			rp.link.Blackhole(true) // nothing reaches the replica after Acquire returned
			want := keyValue(t, ctx, rp.cp, key)
			if got := redislock.DecodeValue(want).Fence; got != lease.Fence() {
				t.Fatalf("the primary's lock has fence %d, want the lease's %d", got, lease.Fence())
			}
			if err := rp.primary.Kill(); err != nil {
				t.Fatal(err)
			}
			promote(t, ctx, rp.cr)
			if got := keyValue(t, ctx, rp.cr, key); got != want {
				g := redislock.DecodeValue(got)
				t.Fatalf("the promoted replica holds fence %d (absent: 0), want the holder's lock (fence %d) as the primary had it", g.Fence, lease.Fence())
			}
			_, err = newLocker(t, newClient(t, rp.replica.Addr()), m.opts...).Acquire(ctx, key, instrument.FailFast())
			if !errors.Is(err, instrument.ErrNotAcquired) {
				t.Fatalf("another caller on the promoted replica: %v, want ErrNotAcquired", err)
			}
		})
	}
}

// deadliner is the lease's local deadline (leasecore.Lease.Deadline, which
// redislock's lease handle carries).
type deadliner interface{ Deadline() time.Time }

// TestReplicaAcks_UnacknowledgedRefreshDoesNotExtendTheLease: a Refresh
// that the stopped replica did not acknowledge fails with ErrNotReplicated
// and leaves the lease's local deadline where the last acknowledged write
// put it (the lock is extended on the primary only, which a failover to
// the replica forgets); the lease is not lost by it, and a Refresh after
// the replica is back extends it.
func TestReplicaAcks_UnacknowledgedRefreshDoesNotExtendTheLease(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := newReplicated(t, ctx)
	l := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.WithReplicaAcks(1, healthyAckTimeout))
	lease, err := l.Acquire(ctx, "lock:replica-acks-refresh", instrument.WithTTL(time.Minute), instrument.FailFast(), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()
	d, ok := lease.(deadliner)
	if !ok {
		t.Fatalf("the lease (%T) has no Deadline", lease)
	}
	before := d.Deadline()

	resume := rp.pauseReplica(t)
	err = lease.Refresh(ctx)
	if !errors.Is(err, redislock.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas acknowledged") {
		t.Fatalf("Refresh = %v, want ErrNotReplicated saying 0 of 1 replicas acknowledged", err)
	}
	if after := d.Deadline(); !after.Equal(before) {
		t.Fatalf("an unacknowledged Refresh moved the lease's deadline by %v", after.Sub(before))
	}
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("an unacknowledged Refresh ended the lease: %v", context.Cause(lease.Context()))
	}

	resume()
	// The replica catches up on what it missed, then acknowledges.
	testenv.WaitFor(t, giveBackWithin, "a Refresh acknowledged by the resumed replica", func() bool {
		err := lease.Refresh(ctx)
		if err != nil && !errors.Is(err, redislock.ErrNotReplicated) {
			t.Fatalf("Refresh after the replica resumed: %v", err)
		}
		return err == nil
	})
	if after := d.Deadline(); !after.After(before) {
		t.Fatalf("an acknowledged Refresh did not extend the lease (deadline moved by %v)", after.Sub(before))
	}
}

// TestReplicaAcks_WatchdogUnacknowledgedLosesTheLease: the watchdog's
// renewals, none acknowledged while the replica is stopped, keep the lock
// on the primary but not the lease: it ends with ErrLockLost at the expiry
// the last acknowledged write gave it, each renewal reported as failed
// with ErrNotReplicated (or cut by the lease's deadline).
func TestReplicaAcks_WatchdogUnacknowledgedLosesTheLease(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := newReplicated(t, ctx)
	l := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.WithReplicaAcks(1, healthyAckTimeout))
	var mu sync.Mutex
	var renewals []error
	cfg, err := instrument.ApplyAcquireOptions(instrument.WithTTL(9*time.Second), instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = instrument.ObserverFuncs{OnRenewed: func(err error) {
		mu.Lock()
		renewals = append(renewals, err)
		mu.Unlock()
	}}
	lease, err := l.Acquire(ctx, "lock:replica-acks-watchdog", instrument.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()
	rp.pauseReplica(t)

	select {
	case <-lease.Context().Done():
	case <-time.After(giveBackWithin):
		t.Fatal("the lease outlived its TTL by far although no renewal was acknowledged")
	}
	if cause := context.Cause(lease.Context()); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("the lease ended with %v, want ErrLockLost", cause)
	}
	mu.Lock()
	defer mu.Unlock()
	unacked := 0
	for _, err := range renewals {
		switch {
		case errors.Is(err, redislock.ErrNotReplicated):
			unacked++
		case errors.Is(err, instrument.ErrNotHeld):
			t.Errorf("a renewal found the lock gone (%v): it stayed the holder's on the primary", err)
		}
		// Other errors: the last renewals' WAIT cut by the lease's
		// local deadline (a timeout), which extends nothing either.
	}
	if unacked == 0 {
		t.Fatalf("no renewal reported ErrNotReplicated (renewals: %v)", renewals)
	}
}

// waitCounter counts the WAIT commands sent through a client, alone or in
// a pipeline.
type waitCounter struct {
	mu sync.Mutex
	n  int
}

func (h *waitCounter) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if strings.EqualFold(c.Name(), "wait") {
			h.n++
		}
	}
}

func (h *waitCounter) get() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *waitCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *waitCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *waitCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// TestReplicaAcks_DefaultSendsNoWait: without WithReplicaAcks, nothing a
// lock does sends WAIT (acquire, a contended acquire handed over by a
// release, refresh, release, concurrent calls that pipeline); with it, an
// acquire and a refresh do (the hook sees WAIT at all).
func TestReplicaAcks_DefaultSendsNoWait(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := newReplicated(t, ctx)
	for _, tc := range []struct {
		name  string
		opts  []redislock.Option
		waits bool
	}{
		{"default", nil, false},
		{"fair", []redislock.Option{redislock.Fair()}, false},
		{"acks", []redislock.Option{redislock.WithReplicaAcks(1, healthyAckTimeout)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &waitCounter{}
			c := ackClient(t, rp.primary.Addr())
			c.AddHook(h)
			l := newLocker(t, c, tc.opts...)
			key := "lock:replica-acks-default-" + tc.name
			a, err := l.Acquire(ctx, key, instrument.FailFast())
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			// A waiter, handed the lock by a's release.
			done := make(chan error, 1)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				b, err := l.Acquire(wctx, key)
				if err == nil {
					err = b.Release(ctx)
				}
				done <- err
			}()
			testenv.WaitFor(t, giveBackWithin, "the waiter to queue", func() bool {
				return rp.cp.LLen(ctx, queueKey(key)).Val() > 0
			})
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the waiter: %v", err)
			}
			// Concurrent pairs, which the combiner pipelines.
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					k := key + ":" + string(rune('a'+i))
					lease, err := l.Acquire(ctx, k, instrument.FailFast())
					if err == nil {
						err = lease.Release(ctx)
					}
					if err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if n := h.get(); (n > 0) != tc.waits {
				t.Fatalf("%d WAIT commands sent; want some: %v", n, tc.waits)
			}
		})
	}
}
