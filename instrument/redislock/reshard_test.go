package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReshard_LockSlotHalfMigrated moves the slot of one lock (lock key,
// fence counter, queue, waiter deadlines: one hash tag) to another primary
// the way redis-cli --cluster reshard does, and stops half-way, with the
// lock's keys split between the two nodes, which is when Redis answers a
// script whose keys are not all on the node ASK or TRYAGAIN. Meanwhile:
// the holder's watchdog renews (refresh.lua is single-key: it follows
// ASK), a fresh Acquire must not get the lock, the holder releases. After
// the migration ends, the waiter that queued before it gets the lock with a
// higher fence, and so does a fresh Acquire after it. Never two holders;
// a Release never claims the lock was lost (ErrNotHeld, ErrLockLost).
func TestReshard_Lock(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	for _, mode := range []string{"default", "fair"} {
		// Which of the lock's keys the first batch moves: the lock alone
		// (the holder's renewals are redirected, every multi-key script
		// is split), the fence counter alone, none (the slot is open, no
		// key has moved).
		for _, first := range []string{"lock", "fence", "none"} {
			t.Run(mode+"/"+first, func(t *testing.T) {
				var opts []redislock.Option
				if mode == "fair" {
					opts = append(opts, redislock.Fair())
				}
				reshardHalfway(t, cl, first, opts...)
			})
		}
	}
	t.Run("release-outlasts-lease", func(t *testing.T) { reshardOutlastsRelease(t, cl) })
	t.Run("fair-dead-head", func(t *testing.T) { reshardFairDeadHead(t, cl) })
	t.Run("misrouted", func(t *testing.T) { reshardMisrouted(t, cl) })
	t.Run("giveback", func(t *testing.T) { reshardGiveBack(t, cl) })
	t.Run("retry-counts", func(t *testing.T) { reshardRetryCounts(t, cl) })
}

// reshardFairDeadHead: in Fair mode an attempt first drops waiters at the
// head of the queue whose deadline has passed. With the slot open and every
// key still on the source, Redis admits acquire_fair.lua there, but the
// script's LPOP of the last entry deletes the queue, and its next LINDEX,
// on a key the source no longer has while the slot migrates, aborts it
// ("Script attempted to access a non local key"). The waiter must keep
// waiting (the next attempt is refused as any during a resharding) and
// get the lock once the migration has ended and the holder released it.
func reshardFairDeadHead(t *testing.T, cl *testenv.RedisCluster) {
	ctx := timeout(t, 30*time.Second)
	admin := cl.Client(t)
	holderL := newLocker(t, cl.Client(t), redislock.Fair())
	waiterC := cl.Client(t)
	refused := make(chan struct{}, 1)
	waiterC.AddHook(reshardReply{refused})
	waiterL := newLocker(t, waiterC, redislock.Fair())
	key := "lock:reshard:{dead-head}"
	holder, err := holderL.Acquire(ctx, key, instrument.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that gave up without leaving (its process died): its entry
	// heads the queue, its deadline long past.
	dead := "deadbeef 5000 nobody {}"
	if err := admin.RPush(ctx, key+":queue", dead).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ZAdd(ctx, key+":waiters", redis.Z{Score: 1, Member: dead}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{key + ":queue", key + ":waiters"} {
		if err := admin.PExpire(ctx, k, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m, err := cl.BeginKeyMigration(key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Finish(10) }()

	type result struct {
		lease instrument.Lease
		err   error
	}
	waited := make(chan result, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l, err := waiterL.Acquire(wctx, key, instrument.WithTTL(5*time.Second), instrument.WithPollInterval(time.Minute))
		waited <- result{l, err}
	}()
	select {
	case <-refused:
	case r := <-waited:
		t.Fatalf("the waiter returned during the migration: %v", r.err)
	}
	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-waited
	if r.err != nil {
		t.Fatalf("the waiter gave up: %v", r.err)
	}
	defer r.lease.Release(ctx)
	if r.lease.Fence() <= holder.Fence() {
		t.Fatalf("fence %d after the migration, not above %d", r.lease.Fence(), holder.Fence())
	}
}

// reshardOutlastsRelease: instrument.Do's fn returns while the lock's slot
// is half-migrated, and stays so past the lease's TTL. The release is
// refused until then; Do must return that error, not ErrLockLost (fn ran
// under the lock), and the lock must be free after the migration (the
// give-back, or its TTL) with a higher fence for the next holder.
func reshardOutlastsRelease(t *testing.T, cl *testenv.RedisCluster) {
	ctx := timeout(t, 30*time.Second)
	admin := cl.Client(t)
	l := newLocker(t, cl.Client(t))
	key := "lock:reshard:{outlasts}"
	var m *testenv.SlotMigration
	var fence uint64
	begun := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- instrument.Do(ctx, l, key, func(ctx context.Context) error {
			defer close(begun)
			v, err := admin.Get(ctx, key).Result()
			if err != nil {
				return err
			}
			fence = redislock.DecodeValue(v).Fence
			if m, err = cl.BeginKeyMigration(key); err != nil {
				return err
			}
			return m.Move(key)
		}, instrument.WithTTL(600*time.Millisecond))
	}()
	<-begun
	if m == nil {
		t.Fatalf("fn failed: %v", <-done)
	}
	defer func() { _ = m.Finish(10) }()
	// End the migration only once the lock has expired on the target
	// (GET follows ASK there): a release still trying then would find it
	// gone and call it lost.
	for {
		if err := admin.Get(ctx, key).Err(); errors.Is(err, redis.Nil) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the lock did not expire")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And only once Do has returned: its release gives up when the lease's
	// TTL has passed by its own clock, which a loaded machine can hold back
	// past the expiry seen here (with the migration ended, a try then found
	// the lock gone).
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("Do did not return although the lock expired")
	}
	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		t.Fatal("Do released the lock while its slot was half-migrated: Redis should have refused release.lua")
	}
	if errors.Is(err, instrument.ErrLockLost) || errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("Do reports the lock lost, though fn ran under it and the release was refused: %v", err)
	}
	t.Logf("Do: %v", err)
	next, err := newLocker(t, cl.Client(t)).Acquire(ctx, key, instrument.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("the lock is not free after the migration: %v", err)
	}
	defer next.Release(ctx)
	if next.Fence() <= fence {
		t.Fatalf("fence %d after the migration, not above %d", next.Fence(), fence)
	}
}

func reshardHalfway(t *testing.T, cl *testenv.RedisCluster, first string, opts ...redislock.Option) {
	ctx := timeout(t, 30*time.Second)
	var holderL *redislock.Locker
	waiterC := cl.Client(t)
	refused := make(chan struct{}, 1)
	waiterC.AddHook(reshardReply{refused})
	waiterL := newLocker(t, waiterC, opts...)
	freshL := newLocker(t, cl.Client(t), opts...)
	key := fmt.Sprintf("lock:reshard:{%s}", t.Name())

	renewed := make(chan error, 64)
	hcfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(900 * time.Millisecond))
	hcfg.Observer = instrument.ObserverFuncs{OnRenewed: func(err error) { renewed <- err }}
	holderC := cl.Client(t)
	holderRefused := make(chan struct{}, 1)
	holderC.AddHook(reshardReply{holderRefused})
	holderL = newLocker(t, holderC, opts...)
	holder, err := holderL.Acquire(ctx, key, instrument.WithConfig(hcfg))
	if err != nil {
		t.Fatal(err)
	}

	waiting := make(chan struct{})
	type result struct {
		lease instrument.Lease
		err   error
	}
	waited := make(chan result, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		cfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(10*time.Second), instrument.WithPollInterval(time.Minute))
		cfg.Observer = instrument.ObserverFuncs{OnWaiting: func(w bool) {
			if w {
				close(waiting)
			}
		}}
		l, err := waiterL.Acquire(wctx, key, instrument.WithConfig(cfg))
		waited <- result{l, err}
	}()
	select {
	case <-waiting:
	case r := <-waited:
		t.Fatalf("the waiter returned before waiting: %v", r.err)
	}

	m, err := cl.BeginKeyMigration(key)
	if err != nil {
		t.Fatal(err)
	}
	finished := false
	t.Cleanup(func() {
		if !finished {
			_ = m.Finish(10)
		}
	})
	switch first {
	case "lock":
		err = m.Move(key)
	case "fence":
		err = m.Move(key + ":fence")
	}
	if err != nil {
		t.Fatal(err)
	}

	// Half-migrated. Renewals go on: two confirmed in a row.
	for ok := 0; ok < 2; {
		select {
		case err := <-renewed:
			if err != nil {
				t.Logf("renewal during the migration: %v", err)
				ok = 0
				continue
			}
			ok++
		case <-holder.Context().Done():
			t.Fatalf("the holder's lease ended during the migration: %v", context.Cause(holder.Context()))
		case <-ctx.Done():
			t.Fatal("no renewal during the migration")
		}
	}
	// The waiter re-tries when the holder's TTL would have run out: with
	// the lock's keys split, Redis refuses it (with every key still on the
	// source it runs there and finds the lock held).
	if first != "none" {
		select {
		case <-refused:
		case r := <-waited:
			t.Fatalf("the waiter returned during the migration: %v", r.err)
		case <-ctx.Done():
			t.Fatal("the waiter made no attempt during the migration")
		}
	}
	// A fresh Acquire must not take the held lock, whatever it is told.
	if l, err := freshL.Acquire(ctx, key, instrument.FailFast()); err == nil {
		_ = l.Release(ctx)
		t.Fatalf("a fresh Acquire got the lock (fence %d) while the holder (fence %d) renews it", l.Fence(), holder.Fence())
	}
	// The holder releases during the migration. release.lua declares a
	// tombstone key that does not exist yet, so Redis refuses it until the
	// slot has moved: the Release waits for that (within its context and
	// the lock's TTL) and succeeds then. It never says the lock was lost.
	released := make(chan error, 1)
	go func() { released <- holder.Release(ctx) }()
	select {
	case <-holderRefused:
	case err := <-released:
		t.Fatalf("Release returned during the migration before Redis refused it: %v", err)
	}

	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	finished = true
	if err := <-released; err != nil {
		if errors.Is(err, instrument.ErrNotHeld) || errors.Is(err, instrument.ErrLockLost) {
			t.Fatalf("Release during the migration reports the lock lost: %v", err)
		}
		t.Fatalf("Release during the migration failed: %v", err)
	}
	if cause := context.Cause(holder.Context()); !errors.Is(cause, instrument.ErrReleased) {
		t.Fatalf("the released lease ended with %v, want ErrReleased", cause)
	}
	r := <-waited
	if r.err != nil {
		t.Fatalf("the waiter queued before the migration did not get the lock after it: %v", r.err)
	}
	if r.lease.Fence() <= holder.Fence() {
		t.Fatalf("fence went from %d (holder) to %d (waiter) across the migration", holder.Fence(), r.lease.Fence())
	}
	// While the waiter holds it, nobody else gets it; after, a fresh
	// Acquire gets a higher fence still.
	if l, err := freshL.Acquire(ctx, key, instrument.FailFast()); err == nil {
		_ = l.Release(ctx)
		t.Fatalf("a fresh Acquire got the lock the waiter holds (fences %d, %d)", l.Fence(), r.lease.Fence())
	}
	if err := r.lease.Release(ctx); err != nil {
		t.Fatalf("the waiter's Release after the migration: %v", err)
	}
	l, err := freshL.Acquire(ctx, key, instrument.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() <= r.lease.Fence() {
		t.Fatalf("fence %d after the migration, not above the waiter's %d", l.Fence(), r.lease.Fence())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// reshardReply signals when a script sent through the client it hooks was
// answered as during a resharding (TRYAGAIN, or the redirect go-redis's
// last try got).
type reshardReply struct{ seen chan<- struct{} }

func (h reshardReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h reshardReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.note(err)
		return err
	}
}
func (h reshardReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.note(c.Err())
		}
		return err
	}
}
func (h reshardReply) note(err error) {
	for _, p := range []string{"TRYAGAIN", "ASK ", "MOVED ", "Script attempted to access a non local key"} {
		if redis.HasErrorPrefix(err, p) {
			select {
			case h.seen <- struct{}{}:
			default:
			}
			return
		}
	}
}
