package workerid_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// resendOf adds to c a ResendOnce for the script in file (this package's
// source), loaded so that its first call is not a NOSCRIPT: other scripts
// the registry runs meanwhile are not resent.
func resendOf(t *testing.T, c *redis.Client, file string) *testenv.ResendOnce {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptLoad(context.Background(), string(src)).Err(); err != nil {
		t.Fatal(err)
	}
	h := &testenv.ResendOnce{SHA: testenv.ScriptSHA(string(src))}
	c.AddHook(h)
	return h
}

// auth2 is a client on addr, closed when the test ends, and a Registry on it
// whose identity (auth-2) claims WorkerID 2 of service "auth".
func auth2(t *testing.T, addr string) (*redis.Client, *workerid.Registry) {
	t.Helper()
	c := redisClient(addr)
	t.Cleanup(func() { _ = c.Close() })
	reg, err := workerid.NewRedis(c, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-2", ""))
	if err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// TestRenew_RetriedRenewalKeepsTheLease: a renewal whose reply was lost runs again; the
// second run finds the slot still this lease's and renews it again. The lease stays
// valid and the generator keeps issuing.
func TestRenew_RetriedRenewalKeepsTheLease(t *testing.T) {
	t.Parallel()
	c, reg := auth2(t, testenv.NewRedis(t).Addr())
	h := resendOf(t, c, "renew.lua")
	ctx := ctxT(t, 20*time.Second)
	l := claim(t, reg, "auth")
	g := bound(t, l)
	before := l.ExpiresAt()
	h.Arm() // the watchdog's next renewal
	testenv.WaitFor(t, 10*time.Second, "a renewal run twice", func() bool {
		return h.Resent() && l.ExpiresAt().After(before)
	})
	if err := l.Err(); err != nil {
		t.Fatalf("lease error after a retried renewal: %v", err)
	}
	if _, err := g.NextID(ctx); err != nil {
		t.Fatalf("NextID after a retried renewal: %v", err)
	}
	if ttl := c.PTTL(ctx, "lockgov:workerid:{2}").Val(); ttl <= 0 {
		t.Fatalf("slot PTTL %v after a retried renewal, want the slot held", ttl)
	}
}

// TestRelease_RetriedReleaseLeavesTheSuccessorAlone: a release whose reply was lost runs
// again after another process claimed the freed slot. The second run must find the slot
// not this lease's and change nothing: the successor keeps its slot and its high-water
// reservation (a retried release that deleted the slot, or lowered the mark to this
// lease's last millisecond, would let a third process reuse the WorkerID under the
// successor).
func TestRelease_RetriedReleaseLeavesTheSuccessorAlone(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c, reg := auth2(t, r.Addr())
	_, succReg := auth2(t, r.Addr())
	h := resendOf(t, c, "release.lua")
	ctx := ctxT(t, 20*time.Second)
	l := claim(t, reg, "auth")
	if _, err := bound(t, l).NextN(ctx, 10); err != nil {
		t.Fatal(err)
	}

	var succ *workerid.Lease
	var succErr error
	h.Between = func() { succ, succErr = succReg.Claim(ctx, "auth") }
	h.Arm()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("retried release: %v", err)
	}
	if !h.Resent() {
		t.Fatal("the release script was not run twice")
	}
	if succErr != nil {
		t.Fatalf("the successor's claim between the two runs: %v", succErr)
	}
	t.Cleanup(func() { _ = succ.Release(context.Background()) })
	if succ.WorkerID() != l.WorkerID() {
		t.Fatalf("successor claimed worker id %d, want the released %d", succ.WorkerID(), l.WorkerID())
	}
	st := succ.State()
	if err := succ.Err(); err != nil {
		t.Fatalf("successor's lease after the retried release: %v", err)
	}
	held, err := c.Exists(ctx, "lockgov:workerid:{2}").Result()
	if err != nil || held != 1 {
		t.Fatalf("successor's slot exists = %d (%v) after the retried release, want 1", held, err)
	}
	hw, err := c.Get(ctx, "lockgov:workerid:{2}:hw").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if hw < st.LimitUnixMilli {
		t.Fatalf("high-water mark %d after the retried release, below the successor's reservation %d", hw, st.LimitUnixMilli)
	}
	if _, err := bound(t, succ).NextID(ctx); err != nil {
		t.Fatalf("successor's NextID: %v", err)
	}
}
