package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// reshardLostReplyWithin bounds the waits of the lost-reply tests during a
// slot move: a give-back or a release retried while the slot moves runs
// within a second of its end (back-off at most 1 s); the rest is room for
// a loaded 2-core machine. The locks live an hour: what frees them here is
// the give-back, never the TTL.
const reshardLostReplyWithin = 30 * time.Second

// TestReshard_ALostAcquireReplyThenAMoveGivesTheLockBack (h111): an Acquire
// that does not wait (FailFast, Retry out of attempts) takes the lock on
// the slot's owner, but its reply is lost; before go-redis resends it, the
// lock's slot is opened for migration and the lock key moved to the target
// (its fence counter not), so the resend, and any further attempt, gets
// TRYAGAIN. The caller is refused (ErrNotAcquired, Redis's answer in the
// text only: a slot move is no store failure), and the lock the lost try
// took under its token, which nobody holds, must be given back once the
// slot has moved, well before its hour-long TTL: the give-back (leave.lua,
// four keys of the slot) is refused throughout the move too, and tried
// again until it runs.
func TestReshard_ALostAcquireReplyThenAMoveGivesTheLockBack(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	for _, tc := range []struct {
		name string
		fair bool
		opt  instrument.AcquireOption
	}{
		{"default/fail-fast", false, instrument.FailFast()},
		{"default/retry", false, instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 2)},
		{"fair/fail-fast", true, instrument.FailFast()},
		{"fair/retry", true, instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := timeout(t, 2*time.Minute)
			key := fmt.Sprintf("lock:reshard-lost-acquire:{%s}", tc.name)
			var opts []redislock.Option
			sha := redislock.AcquireSHA
			if tc.fair {
				opts, sha = append(opts, redislock.Fair()), redislock.AcquireFairSHA
			}
			admin := cl.Client(t)
			c := cl.Client(t)
			var m *testenv.SlotMigration
			resend := &testenv.ResendOnce{SHA: sha, Between: func() {
				// The reply of the try that ran is lost; meanwhile the
				// slot starts moving, and the lock key goes first.
				var err error
				if m, err = cl.BeginKeyMigration(key); err != nil {
					t.Errorf("begin the migration: %v", err)
					return
				}
				if err := m.Move(key); err != nil {
					t.Errorf("move the lock key: %v", err)
				}
			}}
			leaveRefused := make(chan struct{}, 1)
			c.AddHook(resend)
			c.AddHook(leaveReshardReply{leaveRefused})
			l := newLocker(t, c, opts...)
			// The script loaded on the key's node, so that the armed call
			// is an EVALSHA that runs.
			warm, err := l.Acquire(ctx, key, instrument.FailFast())
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}

			resend.Arm()
			lease, err := l.Acquire(ctx, key, instrument.WithTTL(time.Hour), tc.opt)
			if m != nil {
				t.Cleanup(func() { _ = m.Finish(10) })
			}
			if !resend.Resent() || m == nil {
				t.Fatalf("the acquire was not run twice around a migration's start (Acquire: %v)", err)
			}
			if err == nil {
				_ = lease.Release(ctx)
				t.Fatalf("Acquire returned a lease (fence %d) though every try after the lost one was refused", lease.Fence())
			}
			var reply redis.Error
			if !errors.Is(err, instrument.ErrNotAcquired) || errors.As(err, &reply) {
				t.Fatalf("Acquire = %v; want ErrNotAcquired, with Redis's answer in the text only", err)
			}
			t.Logf("Acquire: %v", err)
			// The premise: the lost try took the lock (GET follows the
			// ASK to the target, where the lock key is now).
			if v := admin.Get(ctx, key).Val(); v == "" {
				t.Fatal("the lock key is absent during the move: the lost try did not take it")
			}
			// The move lasts until the give-back has been refused at least
			// once (after go-redis's own tries on TRYAGAIN): it must try
			// again, not leave the lock to its TTL.
			select {
			case <-leaveRefused:
			case <-ctx.Done():
				t.Fatal("no give-back was refused during the move: is the lock given back at all?")
			}
			if err := m.Finish(10); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, reshardLostReplyWithin, "the lock the lost try took to be given back after the move", func() bool {
				return admin.Exists(ctx, key).Val() == 0 && redislock.PendingLeaves(l) == 0
			})
			next, err := newLocker(t, cl.Client(t), opts...).Acquire(ctx, key, instrument.FailFast())
			if err != nil {
				t.Fatalf("the lock is not free after the move: %v", err)
			}
			if err := next.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReshard_ALostReleaseReplyThenAMoveReportsReleased (h111): a holder's
// Release runs (release.lua deletes the lock and leaves this token's
// tombstone) but its reply is lost; before go-redis resends it, the
// lock's slot is opened for migration ("open": no key moved; "moved":
// every key of the slot moved to the target, the slot not yet assigned),
// so the resend, and every try after it, is refused (TRYAGAIN: some of
// release.lua's keys are absent). Release tries again until the slot has
// moved; that try finds the tombstone, and Release must report the lock
// released (nil, the lease ended with ErrReleased), never lost.
func TestReshard_ALostReleaseReplyThenAMoveReportsReleased(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	for _, moved := range []bool{false, true} {
		name := "open"
		if moved {
			name = "moved"
		}
		t.Run(name, func(t *testing.T) {
			ctx := timeout(t, 2*time.Minute)
			key := fmt.Sprintf("lock:reshard-lost-release:{%s}", name)
			admin := cl.Client(t)
			c := cl.Client(t)
			var m *testenv.SlotMigration
			resend := &testenv.ResendOnce{SHA: redislock.ReleaseSHA, Between: func() {
				var err error
				if m, err = cl.BeginKeyMigration(key); err != nil {
					t.Errorf("begin the migration: %v", err)
					return
				}
				if moved {
					if _, err := m.MoveBatch(100); err != nil {
						t.Errorf("move the slot's keys: %v", err)
					}
				}
			}}
			refused := make(chan struct{}, 1)
			c.AddHook(resend)
			c.AddHook(reshardReply{refused})
			l := newLocker(t, c)
			warm, err := l.Acquire(ctx, key, instrument.FailFast())
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lease, err := l.Acquire(ctx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
			if err != nil {
				t.Fatal(err)
			}

			resend.Arm()
			released := make(chan error, 1)
			go func() { released <- lease.Release(ctx) }()
			select {
			case <-refused:
			case err := <-released:
				t.Fatalf("Release returned before Redis refused a try during the move: %v (resent: %v)", err, resend.Resent())
			case <-ctx.Done():
				t.Fatal("no try of the Release was refused")
			}
			if m != nil {
				t.Cleanup(func() { _ = m.Finish(10) })
			}
			if !resend.Resent() || m == nil {
				t.Fatal("the release was not run twice around a migration's start")
			}
			if err := m.Finish(10); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-released:
				if err != nil {
					t.Fatalf("Release = %v; want nil: its first try released the lock (lost: %v)", err,
						errors.Is(err, instrument.ErrNotHeld) || errors.Is(err, instrument.ErrLockLost))
				}
			case <-ctx.Done():
				t.Fatal("Release did not return after the move")
			}
			if cause := context.Cause(lease.Context()); !errors.Is(cause, instrument.ErrReleased) {
				t.Fatalf("the lease ended with %v; want ErrReleased", cause)
			}
			if n := admin.Exists(ctx, key).Val(); n != 0 {
				t.Fatal("the lock key is still there after the release")
			}
			next, err := newLocker(t, cl.Client(t)).Acquire(ctx, key, instrument.FailFast())
			if err != nil {
				t.Fatalf("the lock is not free after the move: %v", err)
			}
			if next.Fence() <= lease.Fence() {
				t.Fatalf("fence %d after the move, not above %d", next.Fence(), lease.Fence())
			}
			if err := next.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// leaveReshardReply signals when a leave.lua try (a give-back) sent
// through the client it hooks was answered as during a resharding.
type leaveReshardReply struct{ seen chan<- struct{} }

func (h leaveReshardReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h leaveReshardReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if runsLeave(cmd) {
			reshardReply(h).note(err)
		}
		return err
	}
}
func (h leaveReshardReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReshard_AMoveOutlastingALostReleasesTombstoneIsNoFalseLoss (h111): as
// TestReshard_ALostReleaseReplyThenAMoveReportsReleased, but the slot stays
// open for longer than the tombstone the lost try left lives (a minute
// under a context without a nearer deadline), while the lease's local
// deadline, an hour-long TTL away, lets Release try on. The try that runs
// after the move finds neither the lock nor the tombstone: it cannot tell
// the lost try's release from a loss, and Release must not say the lock
// was lost (ErrNotHeld, ErrLockLost): it was held until this call, which
// released it. It returns an error of unknown outcome instead.
//
// The Locker's tombstones are capped at tombCap here, not a minute
// (redislock.SetTombstoneCap), so that the move outlasts one in seconds:
// what Release does once the tombstone is gone is the same whatever its
// cap, since the try that finds the lock gone is judged late by the first
// try's tombstone TTL. tombCap leaves the test room to list the tombstone
// (a few round trips after the lost try) on a loaded machine.
func TestReshard_AMoveOutlastingALostReleasesTombstoneIsNoFalseLoss(t *testing.T) {
	t.Parallel()
	const tombCap = 5 * time.Second
	cl := testenv.NewRedisCluster(t, 3)
	ctx := timeout(t, 3*time.Minute)
	const key = "lock:reshard-lost-release:{outlasts-tombstone}"
	admin := cl.Client(t)
	c := cl.Client(t)
	var m *testenv.SlotMigration
	resend := &testenv.ResendOnce{SHA: redislock.ReleaseSHA, Between: func() {
		var err error
		if m, err = cl.BeginKeyMigration(key); err != nil {
			t.Errorf("begin the migration: %v", err)
		}
	}}
	refused := make(chan struct{}, 1)
	c.AddHook(resend)
	c.AddHook(reshardReply{refused})
	l := newLocker(t, c)
	redislock.SetTombstoneCap(l, tombCap)
	warm, err := l.Acquire(ctx, key, instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}

	resend.Arm()
	released := make(chan error, 1)
	// Far more than tombCap: the tombstone lives its cap, not the
	// context's time left.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	go func() { released <- lease.Release(rctx) }()
	select {
	case <-refused:
	case err := <-released:
		t.Fatalf("Release returned before Redis refused a try during the move: %v (resent: %v)", err, resend.Resent())
	}
	if m != nil {
		t.Cleanup(func() { _ = m.Finish(10) })
	}
	if !resend.Resent() || m == nil {
		t.Fatal("the release was not run twice around a migration's start")
	}
	keys, err := m.Keys(100)
	if err != nil {
		t.Fatal(err)
	}
	tomb := ""
	for _, k := range keys {
		if strings.Contains(k, ":rel:") {
			tomb = k
		}
	}
	if tomb == "" {
		t.Fatalf("no tombstone among the slot's keys %q: the lost try did not release", keys)
	}
	// The slot stays open until the tombstone has expired.
	testenv.WaitFor(t, 2*time.Minute, "the lost try's tombstone to expire", func() bool {
		return admin.Exists(ctx, tomb).Val() == 0
	})
	select {
	case err := <-released:
		t.Fatalf("Release returned while the slot was still open: %v", err)
	default:
	}
	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	err = <-released
	if errors.Is(err, instrument.ErrNotHeld) || errors.Is(err, instrument.ErrLockLost) {
		t.Fatalf("Release = %v; the lock was held until this call, whose first try released it", err)
	}
	if err == nil {
		t.Fatal("Release = nil; no try it could see released the lock")
	}
	t.Logf("Release: %v", err)
	next, err := newLocker(t, cl.Client(t)).Acquire(ctx, key, instrument.FailFast())
	if err != nil {
		t.Fatalf("the lock is not free after the move: %v", err)
	}
	if next.Fence() <= lease.Fence() {
		t.Fatalf("fence %d after the move, not above %d", next.Fence(), lease.Fence())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
