package redislock

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestRelease_BatchedWithALaterDeadlineAndItsReplyLostIsNotALoss: the
// release's tombstone lives for the release's own context's time left plus
// a second (storefail.ResendWindow: "go-redis resends ... until the caller's
// context ends"). But a release that the combiner batched with another
// call runs under the batch's context, the latest deadline of its calls
// (pipeline.go batchContext), so go-redis resends the pipeline after the
// read timeout even when the release's own context ended long before. The
// resend then finds the lock gone and its tombstone expired, and Release
// reports ErrNotHeld for a lock it released: instrument.Do reports a
// finished critical section as lost.
func TestRelease_BatchedWithALaterDeadlineAndItsReplyLostIsNotALoss(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	// go-redis's default read timeout (3s), one resend.
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: 1,
		DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	admin := testenv.NewRedisClient(t, r.Addr())
	var dropped atomic.Int32
	var armed, armWrite atomic.Bool
	var directDone chan struct{}
	h := &gateHook{pipes: make(chan int, 16),
		beforePipe: func(cmds []redis.Cmder) {
			if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "evalsha" }) && armed.CompareAndSwap(true, false) {
				<-directDone
				armWrite.Store(true)
			}
		},
		onWrite: func(b []byte) {
			if bytes.Contains(b, []byte("evalsha")) && armWrite.CompareAndSwap(true, false) {
				p.DropNextReply()
				dropped.Add(1)
			}
		},
	}
	c.AddHook(h)
	l, b := combinedLocker(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	warm, err := l.Acquire(ctx, "lock:warm", instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	const key = "lock:short-release"
	lease, err := l.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}

	h.gate, directDone = make(chan struct{}), make(chan struct{})
	direct := holdDirectSends(t, ctx, b)
	// The release, with a second left (a request context near its end), and
	// another goroutine's acquire, with a minute: they leave as one pipeline.
	// The second is what a loaded machine may take to form the batch (a
	// release still queued at its deadline is never sent), and the tombstone
	// it alone would make (2s) still ends before the resend (3s read timeout).
	rctx, rcancel := context.WithTimeout(ctx, time.Second)
	defer rcancel()
	released := make(chan error, 1)
	go func() { released <- lease.Release(rctx) }()
	waitState(t, ctx, b, "the queued release", func() bool { return len(b.queue) == 1 })
	other := make(chan error, 1)
	go func() {
		o, err := l.Acquire(ctx, "lock:other", instrument.FailFast())
		if err == nil {
			defer o.Release(ctx)
		}
		other <- err
	}()
	waitState(t, ctx, b, "the queued acquire", func() bool { return len(b.queue) == 2 })
	armed.Store(true)
	close(h.gate)
	for _, d := range direct {
		if err := (<-d).Err(); err != nil {
			t.Fatalf("held send: %v", err)
		}
	}
	close(directDone)
	err = <-released
	if oerr := <-other; oerr != nil {
		t.Logf("the other acquire: %v", oerr)
	}
	if dropped.Load() != 1 {
		t.Fatalf("%d replies dropped, want the batch's one", dropped.Load())
	}
	if n := admin.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("the lock is still there: the release never ran")
	}
	if errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("Release whose script ran (its reply lost, the pipeline resent after the read timeout): %v, want nil", err)
	}
	if err != nil {
		t.Logf("Release: %v", err)
	}
}
