package redislock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/locktest"
)

func TestConformance_Fair(t *testing.T) {
	// locktest.Run checks goroutines against a goleak.IgnoreCurrent snapshot:
	// nothing else may run in its process.
	if inOwnProcess(t) {
		return
	}
	r, admin := setup(t)
	locktest.Run(t,
		func(t *testing.T) instrument.Locker {
			return newLocker(t, newClient(t, r.Addr()), redislock.Fair())
		},
		locktest.WithExpiryTTL(300*time.Millisecond),
		locktest.WithLoser(func(t *testing.T, key string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			admin.Del(ctx, key)
		}),
	)
}

// TestFair_WaitersAcquireInQueueOrder: ten waiters (ten processes, in
// effect) queue one after another behind a holder; they must get the lock in
// that order.
func TestFair_WaitersAcquireInQueueOrder(t *testing.T) {
	t.Parallel()
	r, c := setup(t)
	ctx := timeout(t, 60*time.Second)
	const key, waiters = "lock:fair", 10
	holder, err := newLocker(t, c, redislock.Fair()).Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range waiters {
		l := newLocker(t, newClient(t, r.Addr()), redislock.Fair())
		wg.Go(func() {
			lease, err := l.Acquire(ctx, key, instrument.WithTTL(time.Minute))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		// The next waiter starts only once this one is in the queue.
		for c.LLen(ctx, "{"+key+"}:queue").Val() != int64(i+1) {
			if ctx.Err() != nil {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("acquisition order %v, want 0..9 in queue order", order)
		}
	}
	if len(order) != waiters {
		t.Fatalf("%d of %d waiters acquired", len(order), waiters)
	}
}

// TestFair_ReleaserCannotBargeAheadOfAWaiter: right after releasing, the
// former holder finds the lock promised to the waiter at the head.
func TestFair_ReleaserCannotBargeAheadOfAWaiter(t *testing.T) {
	t.Parallel()
	r, c := setup(t)
	ctx := timeout(t, 20*time.Second)
	a := newLocker(t, c, redislock.Fair())
	b := newLocker(t, newClient(t, r.Addr()), redislock.Fair())
	lease, err := a.Acquire(ctx, "lock:barge")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	wait := make(chan struct{})
	// b holds the lock it is handed until the releaser has tried: a b that
	// released after a pause could do so before the releaser's attempt ran
	// on a loaded machine, which would then lawfully take the free lock.
	checked := make(chan struct{})
	go func() {
		cfg, _ := instrument.ApplyAcquireOptions()
		var once sync.Once
		cfg.Observer = instrument.ObserverFuncs{OnWaiting: func(bool) { once.Do(func() { close(wait) }) }}
		l, err := b.Acquire(ctx, "lock:barge", instrument.WithConfig(cfg))
		if err == nil {
			<-checked
			err = l.Release(ctx)
		}
		got <- err
	}()
	defer func() {
		select {
		case <-checked:
		default:
			close(checked)
		}
	}()
	<-wait
	for c.LLen(ctx, "{lock:barge}:queue").Val() != 1 {
		time.Sleep(time.Millisecond)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var commands int
	c.AddHook(countHook{&commands})
	if _, err := a.Acquire(ctx, "lock:barge", instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("the releaser barged back in: %v", err)
	}
	// One attempt, one command: a FailFast caller never joins the queue, so
	// it has nothing to leave.
	if commands != 1 {
		t.Fatalf("a refused FailFast sent %d commands, want 1", commands)
	}
	close(checked)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := c.LLen(ctx, "{lock:barge}:queue").Val(); n != 0 {
		t.Fatalf("queue holds %d entries after everyone left", n)
	}
}

// TestFair_GoneWaiterIsSkipped: a waiter that died in the queue (here: an
// entry whose deadline passes) does not block the waiters behind it.
func TestFair_GoneWaiterIsSkipped(t *testing.T) {
	t.Parallel()
	r, c := setup(t)
	ctx := timeout(t, 20*time.Second)
	l := newLocker(t, c, redislock.Fair(), redislock.WithWaiterTimeout(300*time.Millisecond))
	holder, err := l.Acquire(ctx, "lock:gone")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	c.RPush(ctx, "{lock:gone}:queue", "dead-waiter ")
	c.ZAdd(ctx, "{lock:gone}:waiters", redisZ(float64(now+300), "dead-waiter "))
	got := make(chan error, 1)
	go func() {
		other := newLocker(t, newClient(t, r.Addr()), redislock.Fair(), redislock.WithWaiterTimeout(300*time.Millisecond))
		lease, err := other.Acquire(ctx, "lock:gone")
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	for c.LLen(ctx, "{lock:gone}:queue").Val() != 2 {
		time.Sleep(time.Millisecond)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter behind a dead one: %v", err)
	}
}
