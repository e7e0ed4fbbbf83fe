package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestHandoff_CancelRacingTheHandoffStrandsNothing: a release hands the
// lock to a waiter at the moment the waiter's context is cancelled. Either
// the waiter returns a lease that holds the lock, or it returns an error and
// nobody holds the lock once its leave has run (leave.lua hands it on: here,
// deletes it; the leave runs in the background, so that Acquire returns by
// its deadline, and may end just after Acquire did).
func TestHandoff_CancelRacingTheHandoffStrandsNothing(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r, c := setup(t)
			ctx := timeout(t, 60*time.Second)
			const key = "lock:race-leave"
			a := newLocker(t, c, m.opts...)
			b := newLocker(t, newClient(t, r.Addr()), m.opts...)
			won, lost := 0, 0
			for i := range 150 {
				held, err := a.Acquire(ctx, key, instrument.WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithCancel(ctx)
				got := make(chan instrument.Lease, 1)
				errc := make(chan error, 1)
				go func() {
					l, err := b.Acquire(wctx, key, instrument.WithTTL(time.Minute))
					got <- l
					errc <- err
				}()
				waitQueued(t, ctx, c, key, 1)
				// Let the waiter settle into its pause, then race.
				time.Sleep(time.Duration(i%7) * time.Millisecond)
				d := time.Duration(i%10) * 60 * time.Microsecond
				go func() { time.Sleep(d); cancel() }()
				if err := held.Release(ctx); err != nil {
					t.Fatal(err)
				}
				l := <-got
				err = <-errc
				if l != nil {
					won++
					v := c.Get(ctx, key).Val()
					if !strings.HasPrefix(redisValueToken(v), "") || redisDecodeFence(v) != l.Fence() {
						t.Fatalf("waiter's lease fence %d, lock value %q", l.Fence(), v)
					}
					if err := l.Release(ctx); err != nil {
						t.Fatalf("iteration %d: release of the handed lease: %v", i, err)
					}
				} else {
					lost++
					// Within the leave's own bound (a second), with room for
					// a loaded machine; the lock's TTL is a minute.
					lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
					for c.Exists(lctx, key).Val() != 0 && lctx.Err() == nil {
						time.Sleep(5 * time.Millisecond)
					}
					lcancel()
					if v, e := c.Get(ctx, key).Result(); e == nil {
						t.Fatalf("iteration %d: the waiter gave up (%v) and the lock stays held: %q (PTTL %v)", i, err, v, c.PTTL(ctx, key).Val())
					}
				}
				waitFor(t, ctx, "the queue to empty", func() bool { return c.LLen(ctx, queueKey(key)).Val() == 0 })
			}
			t.Logf("waiter got the lock %d times, gave up %d times", won, lost)
		})
	}
}

func redisValueToken(v string) string { t, _, _ := strings.Cut(v, " "); return t }

func redisDecodeFence(v string) uint64 { return redislockDecodeFence(v) }

var redislockDecodeFence = func(v string) uint64 { return redislock.DecodeValue(v).Fence }
