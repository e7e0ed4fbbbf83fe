package redislock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// leaveHook holds back the first leave.lua of key's waiter until proceed is
// closed, and reports every try's error and duration.
type leaveHook struct {
	passThrough
	queue   string
	proceed chan struct{}
	tries   chan leaveTry
	first   chan struct{} // closed when the first try is held back
	n       int
}

type leaveTry struct {
	cmd  string
	err  error
	took time.Duration
}

func (h *leaveHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		// evalsha|eval script 4 lock queue waiters fence tok channel entry retention fair
		if (cmd.Name() != "evalsha" && cmd.Name() != "eval") || len(a) != 12 || fmt.Sprint(a[2]) != "4" || a[4] != h.queue {
			return next(ctx, cmd)
		}
		h.n++ // leaves of one waiter run one after another (leaveUntil)
		if h.n == 1 {
			close(h.first)
			<-h.proceed
		}
		start := time.Now()
		err := next(ctx, cmd)
		h.tries <- leaveTry{cmd.Name(), err, time.Since(start)}
		return err
	}
}

// TestWait_ALeaveWhoseReplyIsLostIsRunAgainHarmlessly: a waiter W gives up
// while the lock is handed to it (default and Fair) or is free with W at
// the head of a Fair queue, so its leave.lua hands the lock to the next
// waiter X. The reply of that leave is lost after it ran; the retry
// (go-redis's or leaveUntil's) runs leave.lua again once X holds the lock.
// It must not hand X's lock on or delete it: X stays the one holder.
func TestWait_ALeaveWhoseReplyIsLostIsRunAgainHarmlessly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fair bool
		free bool // the holder's lock vanishes instead of being released
	}{
		{"default/handed", false, false},
		{"fair/handed", true, false},
		{"fair/free", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, admin := setup(t)
			p := testenv.NewProxy(t, r.Addr())
			key := "lock:leave-lost-reply"
			h := &leaveHook{queue: queueKey(key), proceed: make(chan struct{}), tries: make(chan leaveTry, 16), first: make(chan struct{})}
			wc := newClient(t, p.Addr())
			wc.AddHook(h)
			var opts []redislock.Option
			if tc.fair {
				opts = append(opts, redislock.Fair())
			}
			lw := newLocker(t, wc, opts...)
			lh := newLocker(t, admin, opts...)
			lx := newLocker(t, admin, opts...)
			ctx := timeout(t, time.Minute)
			released := false
			t.Cleanup(func() {
				if !released {
					close(h.proceed)
				}
			})

			// leave.lua in Redis's script cache: W's EVALSHA runs it (a
			// dropped NOSCRIPT would not be a lost reply after it ran).
			if err := redislock.Leave(ctx, admin, "lock:warm", "warm ", "warm 1 x {", tc.fair); err != nil {
				t.Fatal(err)
			}
			holder, err := lh.Acquire(ctx, key, instrument.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			wctx, giveUp := context.WithCancel(ctx)
			defer giveUp()
			werr := make(chan error, 1)
			go func() {
				_, err := lw.Acquire(wctx, key, instrument.WithTTL(time.Minute), instrument.WithPollInterval(time.Minute))
				werr <- err
			}()
			waitQueued(t, ctx, admin, key, 1)
			xgot := make(chan instrument.Lease, 1)
			// X ends with the test (one that failed early), and reports
			// nothing after it.
			xctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer stop()
			wg.Add(1)
			go func() {
				defer wg.Done()
				x, err := lx.Acquire(xctx, key, instrument.WithTTL(time.Minute), instrument.WithPollInterval(100*time.Millisecond))
				if err != nil && xctx.Err() == nil {
					t.Errorf("X: %v", err)
				}
				xgot <- x
			}()
			waitQueued(t, ctx, admin, key, 2)

			giveUp()
			if err := <-werr; err == nil {
				t.Fatal("W took the lock from its holder")
			}
			select {
			case <-h.first:
			case <-ctx.Done():
				t.Fatal("W never ran leave.lua")
			}
			// W's leave is held back: its entry is still at the head.
			if tc.free {
				// The holder's lease is renewed: its lock vanishes as if it
				// had expired (a paused holder).
				if err := admin.Del(ctx, key).Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := holder.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if n := admin.Exists(ctx, key).Val(); n != 1 {
					t.Fatal("the release did not hand the lock to W's entry: the test's premise failed")
				}
			}
			// Let any handoff notification to W's Locker pass the proxy
			// before a reply is dropped (the held-back leave's second
			// counts from before it was held).
			time.Sleep(100 * time.Millisecond)
			dropped := p.DropNextReply()
			released = true
			close(h.proceed)

			var x instrument.Lease
			select {
			case x = <-xgot:
			case <-ctx.Done():
				t.Fatal("X never got the lock")
			}
			if x == nil {
				t.FailNow()
			}
			// Wait for the leave to succeed (the retry ran).
			var first *leaveTry
			for done := false; !done; {
				select {
				case tr := <-h.tries:
					t.Logf("leave try: %s: %v after %v", tr.cmd, tr.err, tr.took)
					if first == nil {
						first = &tr
					}
					done = tr.err == nil
				case <-ctx.Done():
					t.Fatal("W's leave never succeeded")
				}
			}
			select {
			case <-dropped:
			default:
				t.Fatal("no reply was dropped: the scenario did not happen")
			}
			// The dropped reply was the leave's: its first try (an EVALSHA
			// of a cached script: it ran) waited out a timeout, and either
			// failed or was run again by go-redis.
			if first.cmd != "evalsha" || (first.err == nil && first.took < 500*time.Millisecond) {
				t.Fatalf("W's first leave try: %s, %v after %v: its reply was not the one dropped", first.cmd, first.err, first.took)
			}
			t.Logf("first leave try: %v after %v", first.err, first.took)

			v := admin.Get(ctx, key).Val()
			if f := redislock.DecodeValue(v).Fence; f != x.Fence() || x.Context().Err() != nil {
				t.Fatalf("after the leave ran again the lock is %q (fence %d), want X's (fence %d, lease live)", v, f, x.Fence())
			}
			if n := admin.LLen(ctx, queueKey(key)).Val(); n != 0 {
				t.Fatalf("queue holds %d entries", n)
			}
			if err := x.Release(ctx); err != nil {
				t.Errorf("X's Release after W's leave ran again: %v, want nil (X's lock untouched)", err)
			}
		})
	}
}
