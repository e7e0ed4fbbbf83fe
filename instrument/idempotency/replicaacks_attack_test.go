package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_NoAcknowledgedResultIsLostInAFailoverMidFlight: four
// goroutines run Do on fresh keys with WithReplicaAcks(1, ...) while the
// replica is stopped and resumed over and over (SIGSTOP/SIGCONT, random
// spans) and the replication link delays every chunk by 20 ms. Once 40
// calls have succeeded, with calls still in flight, the link is closed
// (in-flight chunks dropped), the primary killed and the replica promoted.
// Every key whose Do returned nil must replay on the promoted replica
// without running fn again. Without the WAIT (the option ignored), results
// returned during a stop or in the link's last 20 ms are not on the
// replica, and their retries run fn again.
func TestReplicaAcks_NoAcknowledgedResultIsLostInAFailoverMidFlight(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	rp := testenv.NewReplicated(t)
	s := newStore(t, testenv.NewRedisClient(t, rp.Primary.Addr()), idempotency.WithReplicaAcks(1, 300*time.Millisecond))
	rp.Link.SetLatency(20 * time.Millisecond)

	var mu sync.Mutex
	var done []string // keys whose Do returned nil
	var refused int
	enough := make(chan struct{})
	var closeEnough sync.Once
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				key := fmt.Sprintf("pay:order-%d-%d", w, i)
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				res, err := s.Do(cctx, key, []byte("fp"), func(context.Context, idempotency.Attempt) ([]byte, error) {
					return []byte(key), nil
				})
				cancel()
				mu.Lock()
				switch {
				case err == nil && string(res.Body) == key:
					done = append(done, key)
					if len(done) == 40 {
						closeEnough.Do(func() { close(enough) })
					}
				case errors.Is(err, idempotency.ErrNotReplicated):
					refused++
				default:
					t.Errorf("Do %s = %+v, %v", key, res, err)
				}
				mu.Unlock()
			}
		})
	}
	flapDone := rp.FlapReplica(t, enough)
	select {
	case <-enough:
	case <-ctx.Done():
		t.Fatalf("40 calls did not succeed: %v", ctx.Err())
	}
	<-flapDone
	if err := rp.Link.Close(); err != nil { // with calls in flight
		t.Fatal(err)
	}
	stop.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}
	promoted := failOver(t, rp)

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d results acknowledged, %d not replicated", len(done), refused)
	var lost []string
	for _, key := range done {
		res, err := promoted.Do(ctx, key, []byte("fp"), func(context.Context, idempotency.Attempt) ([]byte, error) {
			return []byte("ran again"), nil
		})
		if err != nil {
			t.Fatalf("the retry of %s on the promoted replica: %v", key, err)
		}
		if !res.Replayed || string(res.Body) != key {
			lost = append(lost, key)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged results were lost in the failover and ran again: %v", len(lost), len(done), lost)
	}
}
