package fleet_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fleet"
)

// A goroutine that holds one key and waits for another is published as a
// waiter on the second key holding the first: the process's edges of the
// fleet-wide wait-for graph. The wait leaves the heartbeat when it ends.
func TestHeartbeat_PublishesWaitersWithTheKeysTheyHold(t *testing.T) {
	c := redisClient(t)
	const inst = "waiter"
	g := govern(t, redisLocker(t, c), fleet.WithInstance(inst))
	ctx := ctxFor(t, 30*time.Second)

	b, err := g.Acquire(ctx, "lock:b:1") // held elsewhere in the process
	if err != nil {
		t.Fatal(err)
	}
	a, err := g.Acquire(ctx, "lock:a:1")
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, stop := context2(ctx, a)
	done := make(chan error, 1)
	go func() {
		_, err := g.Acquire(waitCtx, "lock:b:1")
		done <- err
	}()
	eventually(t, "the waiter in the heartbeat", func() bool {
		hb := redisBeat(t, c, inst)
		return hb != nil && len(hb.Waiting) == 1
	})
	hb := redisBeat(t, c, inst)
	w := hb.Waiting[0]
	if w.Key != "lock:b:1" || w.Backend != "redis" || w.Pattern == "" || w.Since.IsZero() ||
		!slices.Equal(w.HoldsWhileWaiting, []string{"lock:a:1"}) {
		t.Errorf("waiting entry %+v, want lock:b:1 waited for while holding lock:a:1", w)
	}
	stop()
	if err := <-done; err == nil {
		t.Error("the abandoned wait acquired a held lock")
	}
	eventually(t, "the waiter to leave the heartbeat", func() bool {
		hb := redisBeat(t, c, inst)
		return hb != nil && len(hb.Waiting) == 0 && len(hb.Held) == 2
	})
	_ = a.Release(ctx)
	_ = b.Release(ctx)
}

// context2 is a cancellable context that carries lease a, as the context of
// a goroutine inside instrument.Do(a's key) would.
func context2(parent context.Context, a instrument.Lease) (ctx context.Context, cancel context.CancelFunc) {
	return context.WithCancel(instrument.ContextWithLease(parent, a))
}
