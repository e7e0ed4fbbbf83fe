package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestWait_AcquireReturnsByItsDeadlineWhileThePubSubReconnects: the
// Locker's pub/sub connection breaks and the server stops answering (a
// network partition). A waiting Acquire, on any key of that Locker, must
// return by its context's deadline: the client has ContextTimeoutEnabled,
// which the package doc says makes calls honour their deadlines. The
// notifier's reader redials under the notifier's mutex (notify.go read ->
// pingLocked -> PubSub.Ping, which dials and waits for HELLO's reply for
// the client's ReadTimeout), and every waiting Acquire takes that mutex
// (subscribed, join, subscribe, unsubscribe), so it waits for the redial
// instead.
func TestWait_AcquireReturnsByItsDeadlineWhileThePubSubReconnects(t *testing.T) {
	// Serial: asserts a deadline with sub-second slack, which parallel tests
	// beside it on a loaded 2-core machine overran (-parallel 4, a CPU burner).
	r, admin := setup(t)
	p := testenv.NewProxy(t, r.Addr())
	// go-redis's default ReadTimeout (3s); deadlines bound every call.
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	l := newLocker(t, c)
	other := newLocker(t, admin)
	ctx := timeout(t, time.Minute)
	holder, err := other.Acquire(ctx, "lock:held", instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	// A waiter on l: the pub/sub connection is open and subscribed.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	waiting := make(chan struct{})
	done := make(chan error, 1)
	cfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(time.Minute), instrument.WithPollInterval(time.Minute))
	cfg.Observer = instrument.ObserverFuncs{OnWaiting: func(w bool) {
		if w {
			select {
			case <-waiting:
			default:
				close(waiting)
			}
		}
	}}
	go func() {
		lease, err := l.Acquire(wctx, "lock:held", instrument.WithConfig(cfg))
		if err == nil {
			_ = lease.Release(context.Background())
		}
		done <- err
	}()
	<-waiting
	eventually(t, "the waiter subscribed", func() bool { return keySubscribers(t, admin, "lock:held") == 1 })

	// Partition: nothing gets through, and the pub/sub connection is reset.
	p.Blackhole(true)
	p.Reset()
	defer p.Blackhole(false)

	const budget = 200 * time.Millisecond
	var worst time.Duration
	for until := time.Now().Add(10 * time.Second); time.Now().Before(until); {
		actx, cancel := context.WithTimeout(ctx, budget)
		start := time.Now()
		lease, err := l.Acquire(actx, "lock:other", instrument.WithTTL(time.Second))
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Fatalf("acquired through a partition: %v", lease)
		}
		worst = max(worst, took)
		if took > budget+time.Second {
			break
		}
	}
	t.Logf("worst Acquire with a %v deadline: %v", budget, worst)
	if worst > budget+time.Second {
		t.Errorf("an Acquire with a %v deadline returned after %v (more than a second late) while the pub/sub connection redialled", budget, worst)
	}
	wcancel()
	start := time.Now()
	<-done
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the waiter returned %v after its context was cancelled", took)
	}
}

// TestWait_GivingUpReturnsByTheDeadlineWhenLeaveCannotReachRedis: a waiter
// queued for a handoff leaves the queue when its context ends (leave.lua),
// a round trip bounded by a second, not by that context, which has ended.
// Through a partition that round trip takes its whole second: it must not
// hold Acquire past its deadline.
func TestWait_GivingUpReturnsByTheDeadlineWhenLeaveCannotReachRedis(t *testing.T) {
	// Serial: asserts a deadline with 500 ms of slack (see the test above).
	r, admin := setup(t)
	p := testenv.NewProxy(t, r.Addr())
	l := newLocker(t, newClient(t, p.Addr()))
	other := newLocker(t, admin)
	ctx := timeout(t, time.Minute)
	const key = "lock:leave-partitioned"
	holder, err := other.Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	// A first wait leaves the key's channel subscribed and confirmed, so
	// that the next Acquire queues on its first attempt.
	first, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = l.Acquire(first, key)
	cancel()
	if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("first wait: %v, want ErrNotAcquired", err)
	}

	p.Blackhole(true)
	defer p.Blackhole(false)
	const budget = 200 * time.Millisecond
	actx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	start := time.Now()
	_, err = l.Acquire(actx, key)
	took := time.Since(start)
	if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("Acquire through a partition: %v, want ErrNotAcquired", err)
	}
	// leave.lua through the partition takes a second; half of it is slack
	// for a loaded machine.
	if took > budget+500*time.Millisecond {
		t.Errorf("an Acquire with a %v deadline that gave up while queued returned after %v", budget, took)
	}
}

// TestWait_ALeaveThatCannotReachRedisIsTriedAgain: a waiter gives up while
// Redis is out of its reach, so its leave.lua fails, and then the holder
// releases: release.lua hands the lock to the waiter's entry, whose
// deadline has not passed. Nobody uses that lock. Once Redis can be reached
// again, the waiter's leave must run and hand it on (here: free it), not
// leave it held for the minute of its TTL.
func TestWait_ALeaveThatCannotReachRedisIsTriedAgain(t *testing.T) {
	t.Parallel()
	r, admin := setup(t)
	p := testenv.NewProxy(t, r.Addr())
	ctx := timeout(t, time.Minute)
	const key = "lock:leave-retried"
	holder, giveUp := queuedBehindAHolder(t, ctx, admin, newLocker(t, newClient(t, p.Addr())), newLocker(t, admin), key)

	p.Blackhole(true)
	giveUp()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The default waiter timeout is 5s: the entry is still live, so the
	// release handed it the lock.
	if n := admin.Exists(ctx, key).Val(); n != 1 {
		t.Fatal("the release did not hand the lock to the queued waiter: the test's premise failed")
	}

	p.Blackhole(false)
	start := time.Now()
	waitFor(t, ctx, "the lock handed to a waiter that gave up to be freed", func() bool { return admin.Exists(ctx, key).Val() == 0 })
	// One leave.lua times out (a second) and the next runs within the
	// back-off; the rest is slack for a loaded machine. Without the retry
	// the key lives out its minute.
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the lock was freed %v after Redis came back", took)
	}
}

// TestWait_AHalfOpenPubSubConnectionIsReplaced: the waiter's pub/sub
// connection goes half-open (the proxy drops everything on it and closes
// nothing: a NAT or a partition that lost the flow), and then the lock is
// handed to the waiter. No read on that connection ever fails, so only a
// health check can tell; without one the waiter hears nothing and takes
// the lock at its next retry, a minute later here (Fair, waiter timeout 3
// minutes, poll interval a minute).
func TestWait_AHalfOpenPubSubConnectionIsReplaced(t *testing.T) {
	t.Parallel()
	r, admin := setup(t)
	p := testenv.NewProxy(t, r.Addr())
	w := newLocker(t, newClient(t, p.Addr()), redislock.Fair(), redislock.WithWaiterTimeout(3*time.Minute))
	ctx := timeout(t, 2*time.Minute)
	const key = "lock:half-open-pubsub"
	holder, err := newLocker(t, admin, redislock.Fair()).Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   instrument.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := w.Acquire(ctx, key, instrument.WithTTL(time.Minute), instrument.WithPollInterval(time.Minute))
		got <- result{l, err}
	}()
	waitQueued(t, ctx, admin, key, 1)
	// A Fair waiter may queue before its SUBSCRIBE is sent: wait until
	// Redis has it, so that the connection made half-open is the one the
	// waiter listens on.
	waitFor(t, ctx, "the waiter's subscription", func() bool {
		return len(admin.PubSubChannels(ctx, "{"+key+"}:released*").Val()) == 1
	})
	p.HalfOpen()
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err != nil {
		t.Fatalf("the waiter handed the lock got %v", res.err)
	}
	defer res.l.Release(ctx)
	// Two health checks (2 s apart) find the connection silent, then the
	// waiter's attempt may wait out a read timeout (a second) on a pooled
	// connection that is half-open too; the rest is slack for a loaded
	// machine.
	if took := time.Since(released); took > 20*time.Second {
		t.Errorf("the waiter took the lock handed to it %v after the release", took)
	}
}

// queuedBehindAHolder takes key on holderL (TTL a minute) and starts an
// Acquire of it on waiterL (TTL a minute, poll a minute) that waits until
// it queues in Redis. giveUp cancels that Acquire and fails the test if it
// took the lock.
func queuedBehindAHolder(t *testing.T, ctx context.Context, admin *redis.Client, waiterL, holderL *redislock.Locker, key string) (holder instrument.Lease, giveUp func()) {
	t.Helper()
	holder, err := holderL.Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	errc := make(chan error, 1)
	go func() {
		_, err := waiterL.Acquire(wctx, key, instrument.WithTTL(time.Minute), instrument.WithPollInterval(time.Minute))
		errc <- err
	}()
	waitQueued(t, ctx, admin, key, 1)
	return holder, func() {
		t.Helper()
		cancel()
		if err := <-errc; err == nil {
			t.Fatal("Acquire took the lock from its holder")
		}
	}
}
