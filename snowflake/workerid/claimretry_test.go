package workerid_test

import (
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
)

// TestClaim_RetriedClaimKeepsThePreviousHoldersFloor: when the claim script runs twice
// for one Claim (a retry after a lost reply), the second run finds the slot already held by
// the same token. It must return the floor the first run found, the previous holder's
// mark, not read back the first run's own reservation: the generator issues at once.
func TestClaim_RetriedClaimKeepsThePreviousHoldersFloor(t *testing.T) {
	t.Parallel()
	c, reg := auth2(t, testenv.NewRedis(t).Addr())
	h := resendOf(t, c, "claim.lua")
	ctx := ctxT(t, 10*time.Second)
	// A previous holder released the slot: the mark is the last millisecond it used.
	prev := claim(t, reg, "auth")
	if _, err := bound(t, prev).NextN(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mark, err := c.Get(ctx, "lockgov:workerid:{2}:hw").Int64()
	if err != nil {
		t.Fatal(err)
	}

	h.Arm()
	l := claim(t, reg, "auth")
	if !h.Resent() {
		t.Fatal("the claim script was not run twice")
	}
	if _, err := bound(t, l).NextID(ctx); err != nil {
		t.Fatalf("first ID after a retried claim: %v", err)
	}
	if f := l.State().FloorUnixMilli; f != mark {
		t.Fatalf("floor %d after a retried claim, want the previous holder's mark %d", f, mark)
	}
}
