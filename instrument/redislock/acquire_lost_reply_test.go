package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestAcquire_AnAttemptWhoseReplyIsLostLeavesNoLockBehind: an attempt that
// took the lock, but whose reply was lost and whose caller's context ended
// before go-redis could send it again, returns an error, so nobody knows the
// token that holds the lock. Without a cleanup the lock stays taken for its
// whole TTL (an hour here) and every other caller is refused meanwhile: the
// "reply lost after the command ran" fault, on Acquire. The attempt's own
// token must give the lock up in the background, as a waiter that gave up
// leaves the queue, and Acquire must say the lock was not acquired.
func TestAcquire_AnAttemptWhoseReplyIsLostLeavesNoLockBehind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fair bool
		opts []instrument.AcquireOption
	}{
		{"default/fail-fast", false, []instrument.AcquireOption{instrument.FailFast()}},
		{"default/retry", false, []instrument.AcquireOption{instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 3)}},
		{"default/wait", false, nil},
		{"fair/fail-fast", true, []instrument.AcquireOption{instrument.FailFast()}},
		{"fair/wait", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, admin := setup(t)
			p := testenv.NewProxy(t, r.Addr())
			var opts []redislock.Option
			if tc.fair {
				opts = append(opts, redislock.Fair())
			}
			l := newLocker(t, newClient(t, p.Addr()), opts...)
			other := newLocker(t, admin, opts...)
			ctx := context.Background()
			ttl := instrument.WithTTL(time.Hour)

			// Load the scripts and pool a connection first, so that the
			// next reply through the proxy is the attempt's own.
			warmUp(t, ctx, l, ttl)

			key := "lock:acquire-lost-reply"
			dropped := p.DropNextReply()
			actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			lease, err := l.Acquire(actx, key, append([]instrument.AcquireOption{ttl}, tc.opts...)...)
			if err == nil {
				t.Fatalf("Acquire returned a lease (fence %d) although its reply was lost", lease.Fence())
			}
			select {
			case <-dropped:
			default:
				t.Fatalf("no reply was dropped; Acquire returned %v", err)
			}
			if !errors.Is(err, instrument.ErrNotAcquired) {
				t.Errorf("Acquire = %v, want it to wrap ErrNotAcquired: the lock it may have taken is given up", err)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acquire = %v, want it to wrap the context's end", err)
			}

			// The attempt ran: the lock was taken under a token nobody
			// holds. It must be given up well before its hour.
			eventually(t, "the lock taken by the lost attempt to be given up", func() bool {
				return admin.Exists(ctx, key).Val() == 0
			})
			got, err := other.Acquire(ctx, key, ttl, instrument.FailFast())
			if err != nil {
				t.Fatalf("another caller cannot take the lock after the lost attempt was cleaned up: %v", err)
			}
			if err := got.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n := admin.LLen(ctx, queueKey(key)).Val(); n != 0 {
				t.Errorf("queue of %q holds %d entries, want none", key, n)
			}
		})
	}
}

// TestQuorum_AnAttemptWhoseRepliesAreLostLeavesNoLockBehind: the same
// fault in quorum mode. Two of three nodes run the attempt and grant it,
// but their replies are lost and the caller's context ends; the third node
// denies it (another holder has it there), so no grant is seen and none is
// given back with the attempt. The two lost grants would keep every other
// caller from a majority for the TTL (an hour) after the other holder is
// done. They must be given back in the background.
func TestQuorum_AnAttemptWhoseRepliesAreLostLeavesNoLockBehind(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 3)
	cs, proxies, _ := proxiedClients(t, nodes, 2)
	l, admins, ctx, ttl := warmQuorum(t, nodes, cs, 5*time.Second)
	other := newQuorum(t, nodes, redislock.WithNodeTimeout(time.Second))

	const key = "lock:quorum-lost-replies"
	if err := admins[2].Set(ctx, key, "someone-else 1 {}", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	allDropped := dropNextReplies(t, proxies)
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if lease, err := l.Acquire(actx, key, ttl, instrument.FailFast()); err == nil {
		t.Fatalf("Acquire returned a lease (fence %d) although a majority's replies were lost", lease.Fence())
	} else if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Errorf("Acquire = %v, want it to wrap ErrNotAcquired", err)
	}
	allDropped()
	// The other holder is done with it.
	if err := admins[2].Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the lost grants to be given back on every node", func() bool {
		for _, c := range admins {
			if c.Exists(ctx, key).Val() != 0 {
				return false
			}
		}
		return true
	})
	got, err := other.Acquire(ctx, key, ttl, instrument.FailFast())
	if err != nil {
		t.Fatalf("another caller cannot take the lock after the lost grants were given back: %v", err)
	}
	if err := got.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// runsLeave reports whether cmd runs leave.lua: an EVALSHA or EVAL with
// four keys and five arguments.
func runsLeave(cmd redis.Cmder) bool {
	a := cmd.Args()
	return (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(a) == 12 && fmt.Sprint(a[2]) == "4"
}

// inFlightLeaves counts the leave.lua tries running at once through a
// client, and those that succeeded.
type inFlightLeaves struct {
	passThrough
	mu              sync.Mutex
	now, max, tries int
	ok              int
}

func (h *inFlightLeaves) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !runsLeave(cmd) {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.now++
		h.tries++
		h.max = max(h.max, h.now)
		h.mu.Unlock()
		err := next(ctx, cmd)
		h.mu.Lock()
		h.now--
		if err == nil {
			h.ok++
		}
		h.mu.Unlock()
		return err
	}
}

func (h *inFlightLeaves) counts() (maxInFlight, tries, ok int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max, h.tries, h.ok
}

// TestAcquire_LeavesInAnOutageAreBounded: in an outage every attempt times
// out, and each Acquire that gives up leaves in the background, since its
// attempt may have run. Those leaves must not all run at once (each try
// holds a pooled connection for up to a second while the server does not
// answer, which the application needs too): at most MaxLeaving tries are
// in flight, and every leave still runs once the server answers again.
func TestAcquire_LeavesInAnOutageAreBounded(t *testing.T) {
	t.Parallel()
	const callers = 3 * redislock.MaxLeaving
	_, p, h := giveUpInAnOutage(t, callers)
	// Every caller has given up; let the leaves try against the silent
	// server until each has had a first try at least.
	eventually(t, "every leave to have been tried once", func() bool {
		_, tries, _ := h.counts()
		return tries >= callers
	})
	p.Blackhole(false)
	eventually(t, "every leave to succeed once the server answers", func() bool {
		_, _, ok := h.counts()
		return ok >= callers
	})
	if m, _, _ := h.counts(); m > redislock.MaxLeaving {
		t.Errorf("%d leave.lua tries ran at once, want at most %d", m, redislock.MaxLeaving)
	}
}

// giveUpInAnOutage blackholes a Locker's server and has callers FailFast
// Acquires on keys of their own give up in it (200 ms each): each leaves in
// the background, its attempt's outcome unknown. It returns the Locker, the
// proxy (blackholed) and the hook counting the leave tries.
func giveUpInAnOutage(t *testing.T, callers int) (*redislock.Locker, *testenv.Proxy, *inFlightLeaves) {
	t.Helper()
	r, _ := setup(t)
	p := testenv.NewProxy(t, r.Addr())
	h := &inFlightLeaves{}
	c := newClient(t, p.Addr())
	c.AddHook(h)
	l := newLocker(t, c)
	ctx := timeout(t, time.Minute)
	warmUp(t, ctx, l, instrument.FailFast())

	p.Blackhole(true)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			if _, err := l.Acquire(actx, fmt.Sprintf("lock:outage:%d", i), instrument.FailFast()); err == nil {
				t.Error("Acquire succeeded through a blackhole")
			}
		})
	}
	wg.Wait()
	return l, p, h
}
