package workerid_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// aroundScript is a go-redis hook that, once armed, runs Around in place of the next call
// of script SHA (EVALSHA); Around calls next to send it.
type aroundScript struct {
	SHA    string
	Around func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error

	armed, done atomic.Bool
}

func (h *aroundScript) Arm()       { h.armed.Store(true) }
func (h *aroundScript) Done() bool { return h.done.Load() }

func (h *aroundScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *aroundScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *aroundScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if cmd.Name() == "evalsha" && len(args) > 1 && args[1] == h.SHA && h.armed.CompareAndSwap(true, false) {
			defer h.done.Store(true)
			return h.Around(ctx, cmd, next)
		}
		return next(ctx, cmd)
	}
}

// loadScripts loads this package's scripts into the Redis at c, retrying while its
// connection to a restarted server is re-made, and returns their SHAs by file name.
func loadScripts(t *testing.T, c *redis.Client) map[string]string {
	t.Helper()
	shas := map[string]string{}
	for _, f := range []string{"claim.lua", "renew.lua", "release.lua"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 5*time.Second, "loading "+f, func() bool {
			return c.ScriptLoad(context.Background(), string(src)).Err() == nil
		})
		shas[f] = testenv.ScriptSHA(string(src))
	}
	return shas
}

// TestRedisRestart_AReclaimWhoseReplyAndReleaseAreLostStillWaitsOutTheLoss: A holds
// WorkerID 6, is cut off from Redis for longer than its TTL, and X takes the slot and issues.
// Redis restarts without persistence and X's renewals cannot reach it, so X issues on until
// its lease could have expired. A's renewal finds its slot gone and claims it again, as the
// docs say, "with the same rule": the floor is the server's now + TTL, so A issues only after
// X has stopped. But the re-claim's reply is lost, and so was the release (abandon) the
// failed re-claim sent; A's next renewal then found the slot under its own token and
// renewed it, and A's generator kept the floor from before the loss: it issued at once,
// while X still issued, 28,000-44,000 of the same IDs. Now A sends no such release, and
// its renewal takes the floor the re-claim recorded in the slot: no ID twice, and the
// floor is that one re-claim's (not a TTL further per failed re-claim).
func TestRedisRestart_AReclaimWhoseReplyAndReleaseAreLostStillWaitsOutTheLoss(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	pa, px := testenv.NewProxy(t, r.Addr()), testenv.NewProxy(t, r.Addr())
	ca, cx, direct := redisClient(pa.Addr()), redisClient(px.Addr()), redisClient(r.Addr())
	t.Cleanup(func() { _, _, _ = ca.Close(), cx.Close(), direct.Close() })
	regA, err := workerid.NewRedis(ca, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-6", "a"), workerid.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	regX, err := workerid.NewRedis(cx, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-6", "x"), workerid.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	// A previous holder released the slot a second ago: A need not wait out an unknown mark.
	if err := direct.Set(context.Background(), "lockgov:workerid:{6}:hw", time.Now().Add(-time.Second).UnixMilli(), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	a := claim(t, regA, "auth")
	ga := bound(t, a)

	// A is cut off: its slot expires and X claims it (after A's reservation) and issues.
	pa.Blackhole(true)
	x := claimEventually(t, regX, "auth", 3*testTTL)
	stop := make(chan struct{})
	stopIssuing := sync.OnceFunc(func() { close(stop) })
	t.Cleanup(stopIssuing)
	ix := issue(t, bound(t, x), stop)
	select {
	case <-ix.got:
	case <-ix.done:
		t.Fatalf("X issued nothing: %v", ix.err)
	}

	// Right after one of X's renewals, X is cut off and Redis restarts empty.
	e0 := x.ExpiresAt()
	testenv.WaitFor(t, 2*testTTL, "a renewal of X's lease", func() bool { return x.ExpiresAt().After(e0) })
	px.Blackhole(true)
	t.Cleanup(func() { px.Blackhole(false) })
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	shas := loadScripts(t, direct) // so that A's EVALSHAs run (no NOSCRIPT reply to lose instead)

	// A's re-claim runs but its reply is lost; a release of that failed claim, if A sends
	// one, is lost too.
	reclaim := &aroundScript{SHA: shas["claim.lua"], Around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		pa.DropNextReply()
		return next(ctx, cmd)
	}}
	abandon := &aroundScript{SHA: shas["release.lua"], Around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		pa.Blackhole(true)
		defer pa.Blackhole(false)
		return next(ctx, cmd)
	}}
	ca.AddHook(reclaim)
	ca.AddHook(abandon)
	reclaim.Arm()
	abandon.Arm()
	pa.Blackhole(false)
	testenv.WaitFor(t, 3*testTTL, "A's lease renewed after its failed re-claim", func() bool {
		return reclaim.Done() && a.Err() == nil && time.Until(a.State().ValidUntil) > testTTL/2
	})
	renewedBy := time.Now()
	t.Logf("A renewed %s after the restart: floor %d, server's now+TTL at the restart about %d",
		time.Since(restarted).Round(time.Millisecond), a.State().FloorUnixMilli, restarted.Add(testTTL).UnixMilli())
	// The re-claim ran before A's renewal was seen, on this machine's clock: its floor is
	// at most then + TTL.
	if f, most := a.State().FloorUnixMilli, renewedBy.Add(testTTL).UnixMilli(); f > most {
		t.Errorf("A's floor %d is %s past the re-claim's now + TTL: pushed ahead by more than the one re-claim",
			f, time.Duration(f-most)*time.Millisecond)
	}
	ia := issue(t, ga, stop)

	select {
	case <-ix.done: // X's lease could have expired
	case <-time.After(2 * testTTL):
		t.Fatal("X still issues two TTLs after it was cut off")
	}
	stopIssuing()
	<-ia.done
	all := append(slices.Clone(ia.ids), ix.ids...)
	slices.Sort(all)
	dups := len(all) - len(slices.Compact(slices.Clone(all)))
	t.Logf("X issued %d IDs, stopped with %v; A %d", len(ix.ids), ix.err, len(ia.ids))
	if dups != 0 {
		t.Fatalf("%d IDs issued by both A and X: A's re-claim after the restart did not wait out X's lease", dups)
	}
}
