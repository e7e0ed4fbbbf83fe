package redislock_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// follower moves every client made with its dial option from one server
// to another, as a virtual IP or a DNS name does in a failover.
type follower struct{ target atomic.Pointer[string] }

func (f *follower) to(r *testenv.Redis) { addr := r.Addr(); f.target.Store(&addr) }

func (f *follower) dial(o *redis.Options) {
	o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, *f.target.Load())
	}
}

// TestReleaseFailover_ALostReleaseRetriedOnAPromotedReplica: A holds a lock
// that the replica has; waiter W (another Locker) queues behind it. The
// replication stream is cut and A's Release runs on the primary: it
// hands the lock to W, which starts working, and its reply is lost. The
// primary then dies, the replica (which has neither the release nor the
// handoff) is promoted, and go-redis's resend of the release reaches it,
// through a client that follows the failover. There the lock is still
// A's: the resend releases it again and Release returns nil.
//
//   - "queued-on-replica": the replica had W's queue entry, so the resend
//     hands the lock to W again, there: W's Refresh on the promoted
//     replica confirms it and another caller is refused (Fair: W's entry
//     outlives the failover by WithWaiterTimeout; without Fair its
//     deadline is 5s, and a failover slower than that skips it, which
//     must then read as below).
//   - "queued-after-cut": the replica never had W's entry; the handoff
//     is lost with the primary and the resend deletes A's lock. C takes
//     the lock on the promoted replica while W still believes it holds
//     it (the failover window "Failure modes" names); W's first renewal
//     must find that out (ErrNotHeld, its lease ended with ErrLockLost),
//     and C's fence must be above W's.
//   - "acks": as "queued-after-cut" with WithReplicaAcks: W's
//     confirming attempt is not acknowledged (the stream is cut), so
//     W never holds a lease the promoted replica lacks.
func TestReleaseFailover_ALostReleaseRetriedOnAPromotedReplica(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, variant := range []string{"queued-on-replica", "queued-after-cut", "acks"} {
			t.Run(m.name+"/"+variant, func(t *testing.T) {
				t.Parallel()
				ctx := timeout(t, 2*time.Minute)
				rp := newReplicated(t, ctx)
				var f follower
				f.to(rp.primary)
				const key = "lock:release-failover"
				lopts := append([]redislock.Option(nil), m.opts...)
				wopts := append([]redislock.Option(nil), m.opts...)
				if m.name == "fair" {
					wopts = append(wopts, redislock.WithWaiterTimeout(time.Minute))
				}
				mk := newClient
				if variant == "acks" {
					lopts = append(lopts, redislock.WithReplicaAcks(1, ackTimeout))
					wopts = append(wopts, redislock.WithReplicaAcks(1, ackTimeout))
					mk = func(t testing.TB, addr string, mutate ...func(*redis.Options)) *redis.Client {
						return newClient(t, addr, append(mutate, func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second })...)
					}
				}
				ca := mk(t, rp.primary.Addr(), f.dial)
				resend := &testenv.ResendOnce{SHA: redislock.ReleaseSHA}
				ca.AddHook(resend)
				la := newLocker(t, ca, lopts...)
				lw := newLocker(t, mk(t, rp.primary.Addr(), f.dial), wopts...)
				// The release script loaded on the primary, so that the
				// release's first try runs there as EVALSHA (the hook's).
				warmUp(t, ctx, la, instrument.FailFast())

				a, err := la.Acquire(ctx, key, instrument.WithTTL(time.Minute), instrument.FailFast(), instrument.WithoutWatchdog())
				if err != nil {
					t.Fatal(err)
				}
				held := keyValue(t, ctx, rp.cp, key)
				rp.replicaHas(t, ctx, key, held)

				type result struct {
					lease instrument.Lease
					err   error
				}
				got := make(chan result, 1)
				wait := func() {
					go func() {
						wctx, cancel := context.WithTimeout(ctx, time.Minute)
						defer cancel()
						lease, err := lw.Acquire(wctx, key, instrument.WithTTL(time.Minute), instrument.WithoutWatchdog(), instrument.WithPollInterval(time.Minute))
						got <- result{lease, err}
					}()
					waitQueued(t, ctx, rp.cp, key, 1)
					// Subscribed, so that W hears of the handoff rather
					// than finding it by its next attempt.
					testenv.WaitFor(t, giveBackWithin, "W to subscribe to its release channel", func() bool {
						return keySubscribers(t, rp.cp, key) == 1
					})
				}
				// The replication stream is cut, not the replica stopped: a
				// stopped replica still has the primary's writes in its
				// socket buffer, and reads them once resumed.
				if variant == "queued-on-replica" {
					wait()
					testenv.WaitFor(t, giveBackWithin, "the replica to have W's queue entry", func() bool {
						return rp.cr.LLen(ctx, queueKey(key)).Val() == 1
					})
					rp.link.Blackhole(true)
				} else {
					rp.link.Blackhole(true)
					wait()
				}

				var w result
				resend.Between = func() {
					// The first try ran on the primary and handed the lock
					// to W; its reply is lost.
					select {
					case w = <-got:
					case <-ctx.Done():
						t.Error("W was not handed the lock by the release's first try")
						return
					}
					if err := rp.primary.Kill(); err != nil {
						t.Error(err)
					}
					promote(t, ctx, rp.cr)
					f.to(rp.replica)
				}
				resend.Arm()
				rerr := a.Release(ctx)
				if !resend.Resent() {
					t.Fatal("the release was not run twice: the scenario did not happen")
				}
				if t.Failed() {
					return
				}
				if rerr != nil {
					t.Fatalf("A's Release = %v; want nil (the resend found A's lock on the promoted replica and released it)", rerr)
				}
				if cause := context.Cause(a.Context()); !errors.Is(cause, instrument.ErrReleased) {
					t.Fatalf("A's lease ended with %v; want ErrReleased", cause)
				}

				cl := newLocker(t, newClient(t, rp.replica.Addr()), m.opts...)
				if variant == "acks" {
					if w.err == nil {
						_ = w.lease.Release(ctx)
						t.Fatalf("W got a lease (fence %d) that no replica acknowledged", w.lease.Fence())
					}
					if !errors.Is(w.err, redislock.ErrNotReplicated) {
						t.Fatalf("W's Acquire = %v; want ErrNotReplicated", w.err)
					}
					c, err := cl.Acquire(ctx, key, instrument.FailFast())
					if err != nil {
						t.Fatalf("C cannot take the lock on the promoted replica after A's resend released it: %v", err)
					}
					if err := c.Release(ctx); err != nil {
						t.Fatal(err)
					}
					return
				}
				if w.err != nil {
					t.Fatalf("W's Acquire: %v", w.err)
				}

				if variant == "queued-on-replica" {
					// The resend handed the lock to W on the promoted
					// replica, unless W's entry had expired there (without
					// Fair: a failover slower than the 5s waiter timeout).
					err := w.lease.Refresh(ctx)
					if err == nil {
						if _, err := cl.Acquire(ctx, key, instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
							t.Fatalf("C's Acquire while W's renewed lease holds the lock on the promoted replica = %v; want ErrNotAcquired", err)
						}
						if err := w.lease.Release(ctx); err != nil {
							t.Fatalf("W's Release on the promoted replica: %v", err)
						}
						return
					}
					if m.name == "fair" {
						t.Fatalf("W's Refresh on the promoted replica = %v; want nil (its entry, live for a minute, was there)", err)
					}
					t.Logf("W's entry on the promoted replica expired before the resend (a slow failover): %v", err)
				} else {
					if n := rp.cr.Exists(ctx, key).Val(); n != 0 {
						t.Fatalf("the promoted replica still has the lock (%q) after A's resend released it", keyValue(t, ctx, rp.cr, key))
					}
					// The failover window: C takes the lock while W still
					// believes it holds it (W has not renewed yet).
					c, err := cl.Acquire(ctx, key, instrument.FailFast())
					if err != nil {
						t.Fatalf("C on the promoted replica: %v", err)
					}
					defer func() { _ = c.Release(ctx) }()
					if c.Fence() <= w.lease.Fence() {
						t.Fatalf("C's fence %d is not above W's %d: the overlap is not provable", c.Fence(), w.lease.Fence())
					}
					if err := w.lease.Refresh(ctx); !errors.Is(err, instrument.ErrNotHeld) {
						t.Fatalf("W's first renewal after the failover = %v; want ErrNotHeld", err)
					}
				}
				if cause := context.Cause(w.lease.Context()); !errors.Is(cause, instrument.ErrLockLost) {
					t.Fatalf("W's lease, not renewed on the promoted replica, ended with %v; want ErrLockLost", cause)
				}
			})
		}
	}
}

// replicaHas waits until the replica holds value under key.
func (rp replicated) replicaHas(t *testing.T, ctx context.Context, key, value string) {
	t.Helper()
	testenv.WaitFor(t, giveBackWithin, "the replica to have "+key, func() bool {
		v, err := rp.cr.Get(ctx, key).Result()
		return err == nil && v == value
	})
}

// TestReleaseRestart_ALostReleaseReplyThenARestartWithoutPersistence: A's
// Release runs (the lock deleted, the tombstone left) and its reply is
// lost; redis-server restarts without persistence before go-redis's
// resend, which reaches an empty server: no lock, no tombstone (and no
// script: NOSCRIPT, then EVAL). Nothing there tells "an earlier try
// released it" from "the lock was lost in the restart before the release
// ran" (the "before" case, the same restart before a Release whose reply
// nobody loses): both must report ErrNotHeld, never nil, and Do
// ErrLockLost; the next caller takes the lock with a fence above A's.
func TestReleaseRestart_ALostReleaseReplyThenARestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, lost := range []bool{true, false} {
			name := m.name + "/lost-reply"
			if !lost {
				name = m.name + "/before"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := timeout(t, time.Minute)
				r, c := setup(t)
				resend := &testenv.ResendOnce{SHA: redislock.ReleaseSHA}
				c.AddHook(resend)
				l := newLocker(t, c, m.opts...)
				warmUp(t, ctx, l, instrument.FailFast())
				const key = "lock:release-restart"
				var fence uint64
				restart := func() {
					if err := r.Restart(); err != nil {
						t.Error(err)
					}
				}
				err := instrument.Do(ctx, l, key, func(ctx context.Context) error {
					fence = redislock.DecodeValue(keyValue(t, ctx, c, key)).Fence
					if lost {
						resend.Between = restart
						resend.Arm()
					} else {
						restart()
					}
					return nil
				}, instrument.FailFast(), instrument.WithoutWatchdog())
				if lost != resend.Resent() {
					t.Fatalf("release run twice: %v, want %v: the scenario did not happen", resend.Resent(), lost)
				}
				if !errors.Is(err, instrument.ErrLockLost) || !errors.Is(err, instrument.ErrNotHeld) {
					t.Fatalf("Do = %v; want ErrLockLost wrapping ErrNotHeld (the restart took the tombstone with the lock)", err)
				}
				next, err := newLocker(t, c, m.opts...).Acquire(ctx, key, instrument.FailFast())
				if err != nil {
					t.Fatalf("the lock after the restart: %v", err)
				}
				defer func() { _ = next.Release(ctx) }()
				if next.Fence() <= fence {
					t.Fatalf("fence %d after the restart is not above A's %d", next.Fence(), fence)
				}
			})
		}
	}
}

// lostReply is a go-redis hook that, once armed, runs the next script
// call of SHA (EVALSHA) and then, instead of its reply, runs Then and
// returns a read timeout: the script ran, and neither its reply nor a
// resend's came back (an acquire's lock is taken under a token only the
// failed Acquire knows; a release's outcome is unknown to its caller).
type lostReply struct {
	passThrough
	SHA   string
	Then  func()
	armed atomic.Bool
}

func (h *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); cmd.Name() != "evalsha" || len(a) < 2 || a[1] != h.SHA || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		// Run on a copy, so that cmd gets no value: its reply is lost.
		if err := next(ctx, redis.NewCmd(ctx, cmd.Args()...)); err != nil {
			cmd.SetErr(err)
			return err
		}
		h.Then()
		err := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout (the test's: reply lost)")}
		cmd.SetErr(err)
		return err
	}
}

// heldLeaves is a go-redis hook that holds every leave.lua try until open
// is closed (a try whose context ends first fails with the context's
// error, and is tried again by the Locker).
type heldLeaves struct {
	passThrough
	open <-chan struct{}
}

func (h heldLeaves) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if runsLeave(cmd) {
			select {
			case <-h.open:
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// TestGiveBackSentinel_ALostAcquireGivenBackAcrossAFailover: A's Acquire
// takes the lock on the primary, its reply is lost and the primary dies:
// Acquire fails and gives the lock back in the background, held back by
// the test until the Sentinel has promoted the replica (real Sentinel,
// go-redis's FailoverClient on both sides).
//
//   - "not-replicated": the replica never had A's lock. B takes the lock
//     on the new primary; the give-back then gets through there and must
//     leave B's lock, TTL and lease alone.
//   - "replicated": the replica had A's lock. B is refused on the new
//     primary until the give-back gets through there and frees it.
func TestGiveBackSentinel_ALostAcquireGivenBackAcrossAFailover(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, replicated := range []bool{false, true} {
			name := m.name + "/not-replicated"
			if replicated {
				name = m.name + "/replicated"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := timeout(t, 2*time.Minute)
				s := testenv.NewSentinel(t)
				newFailover := func() *redis.Client { return failoverClient(t, s) }
				cr := newClient(t, s.Replica.Addr())
				const key = "lock:give-back-sentinel"
				sha := redislock.AcquireSHA
				if m.name == "fair" {
					sha = redislock.AcquireFairSHA
				}
				open := make(chan struct{})
				var opened atomic.Bool
				openLeaves := func() {
					if opened.CompareAndSwap(false, true) {
						close(open)
					}
				}
				t.Cleanup(openLeaves)
				lost := &lostReply{SHA: sha, Then: func() {
					if replicated {
						testenv.WaitFor(t, giveBackWithin, "the replica to have A's lock", func() bool {
							return cr.Exists(ctx, key).Val() == 1
						})
					}
					if err := s.Primary.Kill(); err != nil {
						t.Error(err)
					}
				}}
				ca := newFailover()
				counted := &inFlightLeaves{}
				ca.AddHook(lost)
				ca.AddHook(counted)
				ca.AddHook(heldLeaves{open: open})
				la := newLocker(t, ca, m.opts...)
				warmUp(t, ctx, la, instrument.FailFast())
				if !replicated {
					s.Link.Blackhole(true)
				}
				lost.armed.Store(true)
				hour := instrument.WithTTL(time.Hour)
				if a, err := la.Acquire(ctx, key, hour, instrument.FailFast()); err == nil {
					_ = a.Release(ctx)
					t.Fatal("A's Acquire, its reply lost, returned a lease")
				}
				if lost.armed.Load() {
					t.Fatal("A's acquire script did not run: the scenario did not happen")
				}
				promoted(t, ctx, s, cr)
				lb := newLocker(t, newFailover(), m.opts...)
				if !replicated {
					b, err := lb.Acquire(ctx, key, hour, instrument.FailFast())
					if err != nil {
						t.Fatalf("B cannot take the lock on the promoted replica, which never had A's: %v", err)
					}
					want := keyValue(t, ctx, cr, key)
					openLeaves()
					testenv.WaitFor(t, giveBackWithin, "the give-back to get through on the promoted replica and end", func() bool {
						_, _, ok := counted.counts()
						return ok >= 1 && redislock.PendingLeaves(la) == 0
					})
					untouched(t, ctx, cr, key, want, b, "B")
					if err := b.Release(ctx); err != nil {
						t.Fatalf("B's Release: %v, want nil (its lock untouched)", err)
					}
					return
				}
				if b, err := lb.Acquire(ctx, key, hour, instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
					if err == nil {
						_ = b.Release(ctx)
					}
					t.Fatalf("B's Acquire while A's lock, replicated, stands on the promoted replica = %v; want ErrNotAcquired", err)
				}
				openLeaves()
				testenv.WaitFor(t, giveBackWithin, "the give-back to free A's lock on the promoted replica", func() bool {
					return cr.Exists(ctx, key).Val() == 0 && redislock.PendingLeaves(la) == 0
				})
				b, err := lb.Acquire(ctx, key, hour, instrument.FailFast())
				if err != nil {
					t.Fatalf("B after the give-back: %v", err)
				}
				if err := b.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// failoverClient is a go-redis FailoverClient of s's master, with
// newClient's timeouts.
func failoverClient(t *testing.T, s *testenv.Sentinel) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            testenv.SentinelMaster,
		SentinelAddrs:         []string{s.Sentinel.Addr()},
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		MaxRetries:            1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// promoted waits until s's Sentinel names the replica the master and the
// replica (cr, a client of it) says it is one.
func promoted(t *testing.T, ctx context.Context, s *testenv.Sentinel, cr *redis.Client) {
	t.Helper()
	testenv.WaitFor(t, giveBackWithin, "the Sentinel to promote the replica", func() bool {
		addr, err := s.MasterAddr()
		return err == nil && addr == s.Replica.Addr()
	})
	testenv.WaitFor(t, giveBackWithin, "the promoted replica to accept writes", func() bool {
		return infoField(t, ctx, cr, "replication", "role") == "master"
	})
}

// TestReleaseSentinel_AReleaseLostWithItsPrimaryIsGivenBackOnThePromotedReplica:
// as TestReleaseFailover_ALostReleaseRetriedOnAPromotedReplica, through
// a real Sentinel and go-redis FailoverClients, where a Sentinel failover
// (seconds) outlasts go-redis's resend: A's Release runs on the primary,
// handing the lock to W, and the primary dies before either reply comes
// back. Release returns that error (its outcome unknown: not ErrNotHeld)
// and gives the lock back in the background; once the Sentinel has
// promoted the replica (which has A's lock, not the release), the
// give-back frees it there, handing it to W again if W's entry is there
// ("queued-on-replica"; Fair, whose entry outlives the failover), else
// deleting it, and W's next renewal finds that out ("queued-after-cut").
func TestReleaseSentinel_AReleaseLostWithItsPrimaryIsGivenBackOnThePromotedReplica(t *testing.T) {
	t.Parallel()
	for _, onReplica := range []bool{true, false} {
		name := "fair/queued-after-cut"
		if onReplica {
			name = "fair/queued-on-replica"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			s := testenv.NewSentinel(t)
			cr := newClient(t, s.Replica.Addr())
			cp := newClient(t, s.Primary.Addr())
			const key = "lock:release-sentinel"
			ca := failoverClient(t, s)
			got := make(chan instrument.Lease, 1)
			var w instrument.Lease
			lost := &lostReply{SHA: redislock.ReleaseSHA, Then: func() {
				// The release ran on the primary and handed the lock to
				// W; the primary dies once W has heard of it.
				select {
				case w = <-got:
				case <-ctx.Done():
				}
				if err := s.Primary.Kill(); err != nil {
					t.Error(err)
				}
			}}
			ca.AddHook(lost)
			fair := []redislock.Option{redislock.Fair()}
			la := newLocker(t, ca, fair...)
			lw := newLocker(t, failoverClient(t, s), redislock.Fair(), redislock.WithWaiterTimeout(time.Minute))
			warmUp(t, ctx, la, instrument.FailFast())
			a, err := la.Acquire(ctx, key, instrument.WithTTL(time.Minute), instrument.FailFast(), instrument.WithoutWatchdog())
			if err != nil {
				t.Fatal(err)
			}
			held := keyValue(t, ctx, cp, key)
			testenv.WaitFor(t, giveBackWithin, "the replica to have A's lock", func() bool {
				return cr.Get(ctx, key).Val() == held
			})
			wait := func() {
				go func() {
					wctx, cancel := context.WithTimeout(ctx, time.Minute)
					defer cancel()
					lease, err := lw.Acquire(wctx, key, instrument.WithTTL(time.Minute), instrument.WithoutWatchdog(), instrument.WithPollInterval(time.Minute))
					if err != nil {
						t.Errorf("W: %v", err)
					}
					got <- lease
				}()
				waitQueued(t, ctx, cp, key, 1)
				testenv.WaitFor(t, giveBackWithin, "W to subscribe to its release channel", func() bool {
					return keySubscribers(t, cp, key) == 1
				})
			}
			if onReplica {
				wait()
				testenv.WaitFor(t, giveBackWithin, "the replica to have W's queue entry", func() bool {
					return cr.LLen(ctx, queueKey(key)).Val() == 1
				})
				s.Link.Blackhole(true)
			} else {
				s.Link.Blackhole(true)
				wait()
			}
			lost.armed.Store(true)
			rerr := a.Release(ctx)
			if lost.armed.Load() {
				t.Fatal("A's release script did not run: the scenario did not happen")
			}
			if rerr == nil || errors.Is(rerr, instrument.ErrNotHeld) {
				t.Fatalf("A's Release, its reply lost with the primary = %v; want an error of unknown outcome, not nil or ErrNotHeld", rerr)
			}
			if w == nil {
				t.Fatal("W was not handed the lock by A's release on the primary")
			}
			promoted(t, ctx, s, cr)
			testenv.WaitFor(t, giveBackWithin, "A's give-back to take A's lock off the promoted replica", func() bool {
				v, err := cr.Get(ctx, key).Result()
				return (err == redis.Nil || err == nil && v != held) && redislock.PendingLeaves(la) == 0
			})
			cl := newLocker(t, failoverClient(t, s), fair...)
			if onReplica {
				if err := w.Refresh(ctx); err != nil {
					t.Fatalf("W's Refresh on the promoted replica, where the give-back handed it the lock again = %v; want nil", err)
				}
				if _, err := cl.Acquire(ctx, key, instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
					t.Fatalf("C's Acquire while W holds the lock on the promoted replica = %v; want ErrNotAcquired", err)
				}
				if err := w.Release(ctx); err != nil {
					t.Fatalf("W's Release on the promoted replica: %v", err)
				}
				return
			}
			c, err := cl.Acquire(ctx, key, instrument.FailFast())
			if err != nil {
				t.Fatalf("C on the promoted replica after the give-back: %v", err)
			}
			defer func() { _ = c.Release(ctx) }()
			if c.Fence() <= w.Fence() {
				t.Fatalf("C's fence %d is not above W's %d", c.Fence(), w.Fence())
			}
			if err := w.Refresh(ctx); !errors.Is(err, instrument.ErrNotHeld) {
				t.Fatalf("W's next renewal after the failover = %v; want ErrNotHeld", err)
			}
			if cause := context.Cause(w.Context()); !errors.Is(cause, instrument.ErrLockLost) {
				t.Fatalf("W's lease ended with %v; want ErrLockLost", cause)
			}
		})
	}
}
