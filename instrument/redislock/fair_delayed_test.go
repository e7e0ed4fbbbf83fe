package redislock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestFair_DelayedHandoffNotificationAfterTheCounterExpired is
// TestFair_StaleNotificationIsIgnoredAfterTheFenceCounterExpired with a
// real handoff instead of a published copy: H hands the lock to W, and the
// notification stays in flight (W's pub/sub connection alone runs through a
// proxy, which holds it); W's handed lock expires unused; X takes the free
// lock (nobody queues) and holds it past the fence counter's expiry; W's
// next attempt, after that expiry, must report a floor above the handed
// fence, so that the notification, delivered only then, does not make W a
// holder beside X, with a lower fence.
//
// Every step is an event the test brings about and waits for, never a
// duration: W's attempts run when a gate on its client lets them (its own
// retry timer is an hour), the notification arrives when the proxy lets it,
// the handed lock expires and the counter expires when the test ends them
// (PEXPIRE, DEL: what their TTLs would do, without X's watchdog having to
// keep a short lease meanwhile), and W's pub/sub health check, which would
// replace a connection whose PING is held and lose the notification with it,
// is off.
func TestFair_DelayedHandoffNotificationAfterTheCounterExpired(t *testing.T) {
	t.Parallel()
	r, admin := setup(t)
	p := testenv.NewProxy(t, r.Addr())
	var viaProxy atomic.Bool
	c := psClient(t, r.Addr(), p, &viaProxy)
	ctx := timeout(t, time.Minute)
	// W's attempts go directly, on this pooled connection.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	gate := newScriptGate(redislock.AcquireFairSHA)
	c.AddHook(gate)
	const key = "lock:delayed-handoff"
	h := newLocker(t, admin, redislock.Fair())
	x := newLocker(t, newClient(t, r.Addr()), redislock.Fair())
	// An hour's waiter timeout keeps W's queue entry live, and its retry
	// delay (a third of it, or the poll interval) out of the test.
	w := newLocker(t, c, redislock.Fair(), redislock.WithWaiterTimeout(time.Hour))
	redislock.SetHealthInterval(w, time.Hour)
	held, err := h.Acquire(ctx, key, instrument.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	viaProxy.Store(true) // W's pub/sub connection, dialled by its first wait
	wctx, stopW := context.WithCancel(ctx)
	type result struct {
		l   instrument.Lease
		err error
	}
	got := make(chan result, 1)
	wDone := make(chan struct{})
	go func() {
		defer close(wDone)
		// A minute's TTL: the notification, when it comes, is well within
		// the third of it after W's attempt in which W trusts one.
		l, err := w.Acquire(wctx, key, instrument.WithTTL(time.Minute), instrument.WithPollInterval(time.Hour))
		got <- result{l, err}
	}()
	t.Cleanup(func() { stopW(); <-wDone })
	await := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case res := <-got:
			if res.l != nil {
				_ = res.l.Release(ctx)
			}
			t.Fatalf("waiting for %s: W's Acquire returned (%v)", what, res.err)
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
	// let lets W's attempt waiting at the gate run, and waits for its reply.
	let := func(what string) {
		t.Helper()
		select {
		case gate.pass <- struct{}{}:
		case <-ctx.Done():
			t.Fatalf("letting %s through: %v", what, ctx.Err())
		}
		await(gate.ran, what+" to run")
	}

	// W's first attempt queues it; its second follows the confirmation of
	// its subscription, and waits at the gate.
	await(gate.entered, "W's first attempt")
	let("W's first attempt")
	await(gate.entered, "W's second attempt")
	viaProxy.Store(false)
	if n := keySubscribers(t, admin, key); n != 1 {
		t.Fatalf("W's second attempt came with %d subscribers on the key's channels, want its own", n)
	}
	entry := strings.Fields(admin.LIndex(ctx, queueKey(key), 0).Val())
	if len(entry) < 3 { // the entry holds W's token: not for the log
		t.Fatalf("W is not queued (queue length %d)", admin.LLen(ctx, queueKey(key)).Val())
	}
	wTok := entry[0] + " "

	p.Hold(true)
	if err := held.Release(ctx); err != nil { // hands the lock to W; the notification stays in flight
		t.Fatal(err)
	}
	v := admin.Get(ctx, key).Val()
	if !strings.HasPrefix(v, wTok) {
		t.Fatal("H's release did not hand the lock to W")
	}
	handed := redislock.DecodeValue(v).Fence
	// W's handed lock expires unused: W, held at the gate, cannot confirm it.
	if err := admin.PExpire(ctx, key, time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "W's handed lock to expire", func() bool { return admin.Exists(ctx, key).Val() == 0 })
	xl, err := x.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(time.Hour))
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	defer xl.Release(ctx)
	// The counter expires under X, as it does once X has held for longer
	// than its TTL + retention.
	if n := admin.Del(ctx, "{"+key+"}:fence").Val(); n != 1 {
		t.Fatalf("the fence counter was not there to expire (DEL: %d)", n)
	}

	// W's attempt after the expiry finds X holding; the handoff's
	// notification reaches W only after it.
	let("W's attempt after the counter expired")
	p.Hold(false)
	select {
	case res := <-got:
		if res.l != nil {
			defer res.l.Release(ctx)
			t.Fatalf("a handoff notification older than W's last attempt made W a holder beside X: W's fence %d (handed %d), X's %d (X's lease live: %v)",
				res.l.Fence(), handed, xl.Fence(), xl.Context().Err() == nil)
		}
		t.Fatalf("W gave up: %v", res.err)
	case <-gate.entered:
		// W heard the notification (nothing else wakes it), ignored it and
		// tried again: the attempt waits at the gate.
	case <-ctx.Done():
		t.Fatalf("W did not act on the delayed notification: %v", ctx.Err())
	}

	// When X gives the lock up, W, queued behind it, is handed it lawfully.
	if err := xl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := redislock.DecodeValue(admin.Get(ctx, key).Val()).Fence
	let("W's attempt after X's release") // finds the lock its own
	var res result
	select {
	case res = <-got:
	case <-ctx.Done():
		t.Fatalf("W after X's release: %v", ctx.Err())
	}
	if res.err != nil {
		t.Fatalf("W after X's release: %v", res.err)
	}
	defer res.l.Release(ctx)
	if res.l.Fence() != next || next <= xl.Fence() {
		t.Fatalf("W holds with fence %d; X's release handed it %d, X held %d", res.l.Fence(), next, xl.Fence())
	}
}

// scriptGate is a go-redis hook that holds every EVALSHA of one script
// until the test lets it through, so that the test, not the caller's retry
// timer, decides when its attempts run. A call sends on entered, then runs
// once it receives from pass, then sends on ran when its reply is in; each
// step gives up when the call's context ends.
type scriptGate struct {
	passThrough
	sha                string
	entered, pass, ran chan struct{}
}

func newScriptGate(sha string) *scriptGate {
	return &scriptGate{sha: sha, entered: make(chan struct{}), pass: make(chan struct{}), ran: make(chan struct{})}
}

func (g *scriptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() != "evalsha" || len(args) < 2 || args[1] != g.sha {
			return next(ctx, cmd)
		}
		select {
		case g.entered <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-g.pass:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := next(ctx, cmd)
		select {
		case g.ran <- struct{}{}:
		case <-ctx.Done():
		}
		return err
	}
}
