package workerid_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// issuer issues IDs from g in batches until stop is closed or the lease is lost, and keeps
// every ID it got.
type issuer struct {
	mu   sync.Mutex
	ids  []int64
	err  error         // why it stopped, if not told to
	got  chan struct{} // closed after the first batch
	done chan struct{}
}

func issue(t *testing.T, g *snowflake.Generator, stop <-chan struct{}) *issuer {
	is := &issuer{got: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(is.done)
		tick := time.NewTicker(time.Millisecond) // pacing on a shared 2-core box, not synchronisation
		defer tick.Stop()
		first := true
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ids, err := g.NextN(context.Background(), 50)
			switch {
			case errors.Is(err, snowflake.ErrWorkerLeaseLost):
				is.mu.Lock()
				is.err = err
				is.mu.Unlock()
				return
			case errors.Is(err, snowflake.ErrClockBackwards):
				continue // waiting out a high-water mark
			case err != nil:
				t.Error(err)
				return
			}
			is.mu.Lock()
			is.ids = append(is.ids, ids...)
			is.mu.Unlock()
			if first {
				first = false
				close(is.got)
			}
		}
	}()
	return is
}

// stopper returns the stop channel of issuers and the func that closes it, also called
// when the test ends.
func stopper(t *testing.T) (stop <-chan struct{}, stopIssuing func()) {
	c := make(chan struct{})
	stopIssuing = sync.OnceFunc(func() { close(c) })
	t.Cleanup(stopIssuing)
	return c, stopIssuing
}

// releasedASecondAgo sets the high-water mark of WorkerID id as a holder's that released
// it a second ago, so that a claim need not wait out an unknown mark, and returns it.
func releasedASecondAgo(t *testing.T, c redis.Cmdable, id int64) int64 {
	t.Helper()
	mark := time.Now().Add(-time.Second).UnixMilli()
	if err := c.Set(context.Background(), workerid.SlotKey(workerid.DefaultKeyPrefix, id)+":hw", mark, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	return mark
}

// issued waits for is's first batch, failing t if is stops first or none comes within
// the bound; who names the issuer, l is its lease (for the error).
func (is *issuer) issued(t *testing.T, who string, l *workerid.Lease, within time.Duration) {
	t.Helper()
	select {
	case <-is.got:
	case <-is.done:
		t.Fatalf("%s issued nothing: %v", who, is.err)
	case <-time.After(within):
		t.Fatalf("%s never issued an ID (lease error %v)", who, l.Err())
	}
}

// issuedByBoth counts the IDs that both a and b issued; neither may still be issuing.
func issuedByBoth(a, b *issuer) int {
	all := append(slices.Clone(a.ids), b.ids...)
	slices.Sort(all)
	return len(all) - len(slices.Compact(slices.Clone(all)))
}

func (is *issuer) count() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return len(is.ids)
}

// TestRedisRestart_TwoHoldersNeverIssueTheSameID: a Redis restart without persistence
// forgets the slot and its high-water mark while holder A's lease is still valid on A's
// side. B, on another client, claims the empty slot at once; A keeps issuing until its
// renewal finds B's claim. A and B issue concurrently across the restart, and no ID may be
// issued by both: a missing high-water mark means "unknown", so B starts only after every
// lease granted before the restart has ended.
func TestRedisRestart_TwoHoldersNeverIssueTheSameID(t *testing.T) {
	t.Parallel()
	twoHoldersAcrossALoss(t, func(t *testing.T, r *testenv.Redis, _ *redis.Client) {
		if err := r.Restart(); err != nil {
			t.Fatal(err)
		}
	})
}

// twoHoldersAcrossALoss is the body of the tests in which Redis loses A's slot (lose
// does it: a restart, an eviction) while A's lease is valid on A's side and A cannot
// reach Redis; B then claims the slot, A's next renewal finds B's claim, and no ID may be
// issued by both. cc is a client on r that lose may use.
func twoHoldersAcrossALoss(t *testing.T, lose func(t *testing.T, r *testenv.Redis, cc *redis.Client)) {
	r := testenv.NewRedis(t)
	pa := testenv.NewProxy(t, r.Addr()) // A's path to Redis, cut around the restart
	ca, cb, cc := redisClient(pa.Addr()), redisClient(r.Addr()), redisClient(r.Addr())
	t.Cleanup(func() { _, _, _ = ca.Close(), cb.Close(), cc.Close() })
	regA, err := workerid.NewRedis(ca, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-6", "a"))
	if err != nil {
		t.Fatal(err)
	}
	regB, err := workerid.NewRedis(cb, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-6", "b"))
	if err != nil {
		t.Fatal(err)
	}
	a := claim(t, regA, "auth")
	stop, stopIssuing := stopper(t)
	ia := issue(t, bound(t, a), stop)
	ia.issued(t, "A", a, 3*testTTL)

	// Lose the slot right after one of A's renewals, so A's lease has nearly a whole TTL
	// to run.
	e0 := a.ExpiresAt()
	testenv.WaitFor(t, 2*testTTL, "a renewal of A's lease", func() bool { return a.ExpiresAt().After(e0) })
	pa.Blackhole(true) // A's renewals cannot reach the server before B claims
	beforeRestart := ia.count()
	lose(t, r, cc)
	type claimed struct {
		l   *workerid.Lease
		err error
	}
	bc := make(chan claimed, 1)
	go func() {
		l, err := regB.Claim(ctxT(t, 5*testTTL), "auth")
		bc <- claimed{l, err}
	}()
	taken := false
	t.Cleanup(func() {
		if !taken { // the test failed before taking B's claim (bounded by its ctx): release it
			if res := <-bc; res.l != nil {
				_ = res.l.Release(context.Background())
			}
		}
	})
	key := "lockgov:workerid:{6}"
	testenv.WaitFor(t, 2*testTTL, "B's claim after the loss", func() bool {
		v, err := cc.Get(context.Background(), key).Result()
		return err == nil && strings.Contains(v, `"pod_ip":"b"`)
	})
	pa.Blackhole(false) // A's next renewal finds B's claim
	res := <-bc
	taken = true
	if res.err != nil {
		t.Fatalf("B's claim: %v", res.err)
	}
	b := res.l
	t.Cleanup(func() { _ = b.Release(context.Background()) })
	ib := issue(t, bound(t, b), stop)

	select {
	case <-a.Done():
	case <-time.After(3 * testTTL):
		t.Fatal("A's lease did not end after B claimed its slot")
	}
	if !errors.Is(a.Err(), workerid.ErrTakenOver) {
		t.Fatalf("A's lease ended with %v, want ErrTakenOver", a.Err())
	}
	select {
	case <-ia.done:
	case <-time.After(testTTL):
		t.Fatal("A's generator still issues after its lease ended")
	}
	ib.issued(t, "B", b, 3*testTTL)
	stopIssuing()
	<-ib.done
	if ia.err == nil || !errors.Is(ia.err, snowflake.ErrWorkerLeaseLost) {
		t.Fatalf("A's generator stopped with %v, want ErrWorkerLeaseLost", ia.err)
	}

	dups := issuedByBoth(ia, ib)
	t.Logf("A issued %d IDs (%d after the loss began), B %d; B's floor %d, A stopped: %v",
		len(ia.ids), len(ia.ids)-beforeRestart, len(ib.ids), b.State().FloorUnixMilli, ia.err)
	if dups != 0 {
		t.Fatalf("%d IDs issued by both A and B", dups)
	}
}

// TestRedisRestart_ShorterTTLRegistryWaitsOutTheLongestPeerTTL: registries with different
// TTLs on one prefix, as during a rolling deploy that changes the TTL. A (TTL 2s) holds the
// slot; Redis restarts without persistence; B (TTL 1s) claims the empty slot. B's own TTL
// does not cover A's lease, valid on A's side for up to 2s; built WithMaxPeerTTL(2s), B's
// floor is the server's now + 2s, and no ID is issued by both.
func TestRedisRestart_ShorterTTLRegistryWaitsOutTheLongestPeerTTL(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	pa := testenv.NewProxy(t, r.Addr()) // A's path to Redis, cut around the restart
	ca, cb, cc := redisClient(pa.Addr()), redisClient(r.Addr()), redisClient(r.Addr())
	t.Cleanup(func() { _, _, _ = ca.Close(), cb.Close(), cc.Close() })
	const ttlA, ttlB = testTTL, time.Second
	regA, err := workerid.NewRedis(ca, workerid.WithTTL(ttlA), workerid.WithIdentity("auth-6", "a"), workerid.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	regB, err := workerid.NewRedis(cb, workerid.WithTTL(ttlB), workerid.WithMaxPeerTTL(ttlA),
		workerid.WithIdentity("billing-6", "b"), workerid.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	releasedASecondAgo(t, cc, 6)
	a := claim(t, regA, "auth")
	stop, stopIssuing := stopper(t)
	ia := issue(t, bound(t, a), stop)
	ia.issued(t, "A", a, 3*testTTL)

	// Lose the slot right after one of A's renewals, so A's lease has nearly a whole TTL
	// to run.
	e0 := a.ExpiresAt()
	testenv.WaitFor(t, 2*ttlA, "a renewal of A's lease", func() bool { return a.ExpiresAt().After(e0) })
	pa.Blackhole(true) // A's renewals cannot reach the server before B claims
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	b, err := regB.Claim(ctxT(t, 5*ttlA), "billing")
	if err != nil {
		t.Fatalf("B's claim: %v", err)
	}
	t.Cleanup(func() { _ = b.Release(context.Background()) })
	if waited := time.Since(restarted); waited < ttlA-ttlA/10 {
		t.Errorf("B's claim returned %s after the restart, before A's TTL %s could have run out", waited, ttlA)
	}
	pa.Blackhole(false) // A's next renewal finds B's claim
	ib := issue(t, bound(t, b), stop)
	select {
	case <-ia.done:
	case <-time.After(2 * ttlA):
		t.Fatal("A's generator still issues long after B claimed its slot")
	}
	ib.issued(t, "B", b, 2*ttlA)
	stopIssuing()
	<-ib.done
	dups := issuedByBoth(ia, ib)
	t.Logf("A issued %d IDs, stopped with %v; B %d, floor %d", len(ia.ids), ia.err, len(ib.ids), b.State().FloorUnixMilli)
	if dups != 0 {
		t.Fatalf("%d IDs issued by both A and B", dups)
	}
}
