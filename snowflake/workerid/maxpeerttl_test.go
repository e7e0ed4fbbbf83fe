package workerid_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/snowflake/workerid"
)

// TestWithMaxPeerTTL_AnOverlongDurationIsRefused: bad input must be a clear error, as a
// negative WithMaxPeerTTL and a TTL longer than the high-water TTL are. WithMaxPeerTTL of
// the largest Duration is accepted; the claim's floor for a missing mark is then about 292
// years ahead, Claim's "at most two of these TTLs ahead" bound overflows to negative, and
// Claim returns at once a lease whose generator cannot issue. Its Release leaves that
// floor as the slot's mark, so the next Registry on the prefix that takes the WorkerID,
// without the option, cannot issue on it either.
func TestWithMaxPeerTTL_AnOverlongDurationIsRefused(t *testing.T) {
	t.Parallel()
	s := redisStore(t)
	c := redisClient(s.addr)
	t.Cleanup(func() { _ = c.Close() })
	reg, err := workerid.NewRedis(c, workerid.WithTTL(testTTL), workerid.WithMaxPeerTTL(math.MaxInt64),
		workerid.WithIdentity("auth-5", ""), workerid.WithoutHeartbeat())
	if errors.Is(err, workerid.ErrInvalid) {
		if !strings.Contains(err.Error(), "max peer TTL") {
			t.Errorf("the error does not name the option: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	start := time.Now()
	l, err := reg.Claim(ctx, "auth")
	if err != nil {
		t.Fatalf("WithMaxPeerTTL(%s) accepted; Claim: %v", time.Duration(math.MaxInt64), err)
	}
	took := time.Since(start)
	floor := time.UnixMilli(l.State().FloorUnixMilli).UTC()
	_, nerr := bound(t, l).NextID(ctx)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := claim(t, s.registry(t, workerid.WithIdentity("auth-5", ""), workerid.WithoutHeartbeat()), "auth")
	_, oerr := bound(t, next).NextID(ctx)
	t.Fatalf("WithMaxPeerTTL(%s) accepted: Claim returned after %s with floor %s, NextID: %v; "+
		"after its Release, another Registry's lease on WorkerID %d has floor %s, NextID: %v",
		time.Duration(math.MaxInt64), took.Round(time.Millisecond), floor.Format(time.RFC3339), nerr,
		next.WorkerID(), time.UnixMilli(next.State().FloorUnixMilli).UTC().Format(time.RFC3339), oerr)
}
