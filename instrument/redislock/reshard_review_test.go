package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// reshardMisrouted (h100): a plain *redis.Client pointed at one node of a
// Cluster (a misconfiguration: it follows no redirect) is answered MOVED
// for a key whose slot another primary serves, on every attempt, for good.
// Only a ClusterClient's MOVED or ASK is a resharding (go-redis ran out of
// redirects while the slot moved); a plain client's must fail the Acquire
// at once with Redis's answer, as it did before the resharding retries.
// With them, a waiting Acquire waited out its whole deadline (forever
// without one) and returned ErrNotAcquired with the context's error, the
// MOVED that says what is wrong dropped.
func reshardMisrouted(t *testing.T, cl *testenv.RedisCluster) {
	ctx := timeout(t, 30*time.Second)
	key := "lock:reshard:{misrouted}"
	owner, err := cl.KeyOwner(key)
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, testenv.NewRedisClient(t, cl.OtherPrimary(owner).Addr()))
	for _, wait := range []struct {
		name string
		opt  instrument.AcquireOption
	}{
		{"deadline", instrument.WaitUntilDeadline()},
		{"retry", instrument.Retry(instrument.ConstantBackoff(10*time.Millisecond), 1000)},
	} {
		// 3s: long enough that a misrouted waiter that waits is not told
		// apart from one that fails by a race; a fixed build returns at
		// the first answer.
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := l.Acquire(actx, key, wait.opt)
		cancel()
		var reply redis.Error
		if err == nil || !errors.As(err, &reply) || !strings.HasPrefix(reply.Error(), "MOVED ") {
			t.Fatalf("%s: Acquire through a client that follows no redirect = %v; want Redis's MOVED answer at once", wait.name, err)
		}
		if errors.Is(err, instrument.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: Acquire waited out its deadline on a MOVED that never goes away: %v", wait.name, err)
		}
	}
}

// reshardGiveBack (h100): the give-back of a lock whose holder is gone (an
// Acquire that gave up after a release handed it the lock, a Release whose
// outcome is unknown) runs leave.lua while the lock's slot is migrating,
// with every key still on the source and only dead waiters queued. Redis
// admits the script there (all its keys exist), and hand_over's LPOP of the
// queue it has just emptied aborts it ("Script attempted to access a non
// local key"): the dead entries are dropped, the lock is not. The
// give-back must try again (the next try is refused TRYAGAIN until the
// slot has moved, then runs on the target) and free the lock; giving up on
// that answer left it to its TTL, with nobody holding it.
func reshardGiveBack(t *testing.T, cl *testenv.RedisCluster) {
	ctx := timeout(t, 30*time.Second)
	admin := cl.Client(t)
	c := cl.Client(t)
	refused := make(chan struct{}, 1)
	c.AddHook(reshardReply{refused})
	l := newLocker(t, c)
	redislock.WidenLeaveWindow(l, 20*time.Second) // a loaded machine: the retries outlast the migration
	key := "lock:reshard:{giveback}"
	tok := "gonegonegonegonegone00 "
	dead := "deadbeef 5000 nobody {}"
	pipe := admin.TxPipeline()
	pipe.Set(ctx, key, tok+"7 {}", 30*time.Second)
	pipe.Set(ctx, key+":fence", "7", time.Minute)
	pipe.RPush(ctx, key+":queue", dead)
	pipe.ZAdd(ctx, key+":waiters", redis.Z{Score: 1, Member: dead})
	pipe.PExpire(ctx, key+":queue", time.Minute)
	pipe.PExpire(ctx, key+":waiters", time.Minute)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := cl.BeginKeyMigration(key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Finish(10) }()
	if err := redislock.GiveBack(ctx, l, key, tok, tok+"1000 x {}"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-refused:
	case <-ctx.Done():
		t.Fatal("the give-back was not refused during the migration")
	}
	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	for redislock.PendingLeaves(l) > 0 {
		if ctx.Err() != nil {
			t.Fatal("the give-back did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v, err := admin.Get(ctx, key).Result(); !errors.Is(err, redis.Nil) {
		ttl := admin.PTTL(ctx, key).Val()
		t.Fatalf("after the migration and the give-back the gone holder's lock is still there (%q, %v, PTTL %v): left to its TTL", v, err, ttl)
	}
}

// reshardRetryCounts (h100, held): a Retry caller answered as during a
// resharding on every attempt is refused (ErrNotAcquired, naming the
// answer) after its MaxAttempts attempts, each one counted, not after its
// context: the resharding pause is an attempt of Retry's, not a wait of
// its own.
func reshardRetryCounts(t *testing.T, cl *testenv.RedisCluster) {
	ctx := timeout(t, 30*time.Second)
	key := "lock:reshard:{retry-counts}"
	holder, err := newLocker(t, cl.Client(t)).Acquire(ctx, key, instrument.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, err := cl.BeginKeyMigration(key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Finish(10) }()
	if err := m.Move(key); err != nil { // the lock and its counter split: every attempt TRYAGAIN
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = newLocker(t, cl.Client(t)).Acquire(actx, key, instrument.Retry(instrument.ConstantBackoff(5*time.Millisecond), 3))
	cancel()
	// Refused as by a holder (ErrNotAcquired), the answer named in the
	// text but not in the chain, where storefail reads TRYAGAIN as a
	// server not serving (a store failure: FailOpen would decide without
	// the store).
	var reply redis.Error
	if !errors.Is(err, instrument.ErrNotAcquired) || errors.As(err, &reply) ||
		!strings.Contains(err.Error(), "after 3 attempts") || !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Fatalf("Retry(3) during a resharding = %v; want ErrNotAcquired after 3 attempts, naming TRYAGAIN", err)
	}
	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
