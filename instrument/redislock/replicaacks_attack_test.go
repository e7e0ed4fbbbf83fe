package redislock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_ASubMillisecondTimeoutStillBoundsTheWait: WAIT takes its
// timeout in whole milliseconds, and WAIT n 0 blocks until n replicas
// answer. A timeout New accepts (> 0, below the read timeout) but under a
// millisecond must not become WAIT n 0: with the replica stopped, the
// Acquire fails with ErrNotReplicated once the timeout (rounded up to the
// millisecond) has passed, not with the client's read timeout on a WAIT
// that never answers (after which go-redis resends the whole pipeline).
func TestReplicaAcks_ASubMillisecondTimeoutStillBoundsTheWait(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	rp := newReplicated(t, ctx)
	l := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.WithReplicaAcks(1, 500*time.Microsecond))
	rp.pauseReplica(t)

	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	const key = "lock:replica-acks-sub-ms"
	lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
	if err == nil {
		_ = lease.Release(ctx)
		t.Fatal("Acquire succeeded although no replica acknowledged the lock")
	}
	if !errors.Is(err, redislock.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas acknowledged") {
		t.Fatalf("Acquire = %v, want ErrNotReplicated saying 0 of 1 replicas acknowledged (a WAIT with timeout 0 blocks until the read timeout)", err)
	}
	testenv.WaitFor(t, giveBackWithin, "the give-back of the unacknowledged lock to end", func() bool {
		return redislock.PendingLeaves(l) == 0
	})
	if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("the unacknowledged lock is still on the primary (EXISTS %d)", n)
	}
}

// dialGate holds every dial of its client while armed, until opened, and
// counts the dials it held.
type dialGate struct {
	mu     sync.Mutex
	gate   chan struct{} // nil: dials pass
	held   int
	passes chan struct{}
}

func (g *dialGate) arm() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *dialGate) open() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

func (g *dialGate) heldDials() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (g *dialGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		g.mu.Lock()
		gate := g.gate
		if gate != nil {
			g.held++
		}
		g.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return next(ctx, network, addr)
	}
}

func (g *dialGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *dialGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReplicaAcks_ALostReplyIsGrantedOnlyByTheResendsWait: the pipeline
// [acquire script, WAIT] runs, the replica acknowledges it, and its replies
// are lost; go-redis resends the whole pipeline on a new connection, whose
// dial is held until the test has decided the replica's fate. With the
// replica stopped meanwhile, the resend's script re-arms the lock (a write
// the stopped replica never acknowledges) and its WAIT counts 0: the
// Acquire fails with ErrNotReplicated and gives the lock back, although
// the first try's write was acknowledged (its answer was never read). With
// the replica healthy, the resend is granted with the first try's fence,
// and the replica holds the lock.
func TestReplicaAcks_ALostReplyIsGrantedOnlyByTheResendsWait(t *testing.T) {
	for _, stop := range []bool{true, false} {
		name := map[bool]string{true: "replica-stopped-before-resend", false: "replica-healthy"}[stop]
		t.Run(name, func(t *testing.T) {
			ctx := timeout(t, 2*time.Minute)
			rp := newReplicated(t, ctx)
			p := testenv.NewProxy(t, rp.primary.Addr())
			g := &dialGate{}
			// One connection: the resend must dial (the gate holds it).
			c := newClient(t, p.Addr(), func(o *redis.Options) {
				o.PoolSize = 1
				o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second
			})
			c.AddHook(g)
			ackTimeout := healthyAckTimeout
			if stop {
				ackTimeout = 500 * time.Millisecond
			}
			l := newLocker(t, c, redislock.WithReplicaAcks(1, ackTimeout))
			warmUp(t, ctx, l, instrument.FailFast())

			key := "lock:replica-acks-lost-reply-" + name
			g.arm()
			dropped := p.DropNextReply()
			type result struct {
				lease instrument.Lease
				err   error
			}
			done := make(chan result, 1)
			go func() {
				actx, cancel := context.WithTimeout(ctx, 45*time.Second)
				defer cancel()
				lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), instrument.FailFast(), instrument.WithoutWatchdog())
				done <- result{lease, err}
			}()
			select {
			case <-dropped:
			case res := <-done:
				t.Fatalf("Acquire returned (%v) before its reply was dropped", res.err)
			}
			// The first try ran on the primary; its replies are gone.
			if stop {
				rp.pauseReplica(t)
			}
			testenv.WaitFor(t, giveBackWithin, "the resend to dial", func() bool { return g.heldDials() > 0 })
			g.open()
			res := <-done
			if stop {
				if res.err == nil {
					_ = res.lease.Release(ctx)
					t.Fatalf("Acquire granted (fence %d) by a resend no replica acknowledged", res.lease.Fence())
				}
				if !errors.Is(res.err, redislock.ErrNotReplicated) {
					t.Fatalf("Acquire = %v, want ErrNotReplicated (the resend's WAIT counted no replica)", res.err)
				}
				testenv.WaitFor(t, giveBackWithin, "the give-back of the unacknowledged lock", func() bool {
					return redislock.PendingLeaves(l) == 0
				})
				if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
					t.Fatalf("the unacknowledged lock is still on the primary (EXISTS %d)", n)
				}
				return
			}
			if res.err != nil {
				t.Fatalf("Acquire after a lost reply, replica healthy: %v", res.err)
			}
			defer func() { _ = res.lease.Release(ctx) }()
			want := keyValue(t, ctx, rp.cp, key)
			if got := redislock.DecodeValue(want).Fence; got != res.lease.Fence() {
				t.Fatalf("the primary's lock has fence %d, the lease %d", got, res.lease.Fence())
			}
			if got := keyValue(t, ctx, rp.cr, key); got != want {
				t.Fatalf("the replica has %q, want the granted lock %q (WAIT acknowledged it)", got, want)
			}
		})
	}
}
