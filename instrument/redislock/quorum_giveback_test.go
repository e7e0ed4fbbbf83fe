package redislock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// cutAfterReply blackholes p once the first script call (EVALSHA or EVAL)
// after arm has its reply: the node answered, and nothing sent to it after
// that arrives.
type cutAfterReply struct {
	passThrough
	p     *testenv.Proxy
	mu    sync.Mutex
	armed bool
	cut   bool
}

func (h *cutAfterReply) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = true
}

func (h *cutAfterReply) didCut() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cut
}

func (h *cutAfterReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() != "evalsha" && cmd.Name() != "eval" {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.armed && err == nil {
			h.armed, h.cut = false, true
			h.p.Blackhole(true)
		}
		return err
	}
}

// TestQuorum_AGrantWhoseGiveBackFailsIsGivenBackLater: an attempt is
// granted by a minority of the nodes (node 0; the others are held by
// someone else), so Acquire gives the grant back at once, before it
// returns. Node 0 answered the attempt but is cut off before the give-back
// reaches it: the release fails, and node 0 keeps the lock under a token
// that nobody holds once Acquire has returned. No reply of the attempt was
// lost, so nothing else takes it back: once the other holder is done, the
// stale grant (an hour's TTL here) would stand in the way of every
// majority that needs node 0. The failed give-back must be retried in the
// background, as a lost reply's leave is.
func TestQuorum_AGrantWhoseGiveBackFailsIsGivenBackLater(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 3)
	cs, proxies, clients := proxiedClients(t, nodes, 1)
	p := proxies[0]
	h := &cutAfterReply{p: p}
	clients[0].AddHook(h)
	l, admins, ctx, ttl := warmQuorum(t, nodes, cs, time.Second)
	other := newQuorum(t, nodes, redislock.WithNodeTimeout(time.Second))

	const key = "lock:quorum-give-back"
	for _, a := range admins[1:] {
		if err := a.Set(ctx, key, "someone-else 1 {}", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	h.arm()
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if lease, err := l.Acquire(actx, key, ttl, instrument.FailFast()); err == nil {
		t.Fatalf("Acquire returned a lease (fence %d) with one node of three", lease.Fence())
	} else if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("Acquire = %v, want ErrNotAcquired", err)
	}
	if !h.didCut() {
		t.Fatal("node 0 was not cut off after it answered")
	}
	// The give-back did not reach node 0 (nothing reaches it now).
	if n := admins[0].Exists(ctx, key).Val(); n != 1 {
		t.Fatalf("node 0 holds %d locks on %q, want its grant (the test's premise)", n, key)
	}

	p.Blackhole(false)
	// The other holder is done with it.
	for _, a := range admins[1:] {
		if err := a.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "node 0's grant to be given back", func() bool {
		return admins[0].Exists(ctx, key).Val() == 0
	})
	got, err := other.Acquire(ctx, key, ttl, instrument.FailFast())
	if err != nil {
		t.Fatalf("another caller cannot take the lock: %v", err)
	}
	if err := got.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
