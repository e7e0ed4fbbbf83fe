package quota_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// warmPool opens n initialised connections in c's pool, so that a resend is
// written on one of them without a handshake the stalled server would hold.
func warmPool(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _ = c.BLPop(context.Background(), 100*time.Millisecond, fmt.Sprintf("warm:%d", i)).Err() })
	}
	wg.Wait()
}

// stallAfterLostReply arms the proxy to drop the reply of the next command
// for which arm is called, and then stops redis-server for 3 s: go-redis
// resends the command (the first run's reply never came), and the resend
// runs only when the server resumes, past the caller's 1 s deadline and
// the second of margin call records used to have. wait returns once the
// server runs again (and fails the test if the fault never came).
func stallAfterLostReply(t *testing.T, r *testenv.Redis, p *testenv.Proxy) (arm, wait func()) {
	t.Helper()
	armed := make(chan (<-chan struct{}), 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		dropped := <-armed
		<-dropped
		if err := r.Pause(); err != nil {
			t.Error(err)
			return
		}
		time.Sleep(3 * time.Second)
		if err := r.Resume(); err != nil {
			t.Error(err)
		}
	}()
	var once sync.Once
	arm = func() { once.Do(func() { armed <- p.DropNextReply() }) }
	wait = func() {
		t.Helper()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the reply was never dropped: the fault did not happen")
		}
	}
	return arm, wait
}

// TestAdd_AResendRunAfterAStallCreditsOnce: Add's reply is lost after its
// script ran, go-redis resends it, and the server stalls past the caller's
// deadline before it runs the resend. The call's record must still be there:
// an Add is credited once.
func TestAdd_AResendRunAfterAStallCreditsOnce(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	c := testenv.NewLostReplyClient(t, p.Addr())
	direct := r.Client(t)
	q := newQuota(t, c)
	bg := timeout(t, time.Minute)
	if err := q.Set(bg, "stock", 10); err != nil {
		t.Fatal(err)
	}
	if err := q.Add(bg, "warm", 1); err != nil { // loads credit.lua
		t.Fatal(err)
	}
	warmPool(t, c, 8)
	arm, wait := stallAfterLostReply(t, r, p)
	arm()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err := q.Add(ctx, "stock", 5)
	cancel()
	t.Logf("Add(5) under the fault: %v", err)
	wait()
	got, err := direct.HGet(bg, quota.DefaultPrefix+"{stock}", "remain").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if got != 15 {
		t.Fatalf("balance after one Add(5) onto 10 = %d, want 15 (the resend ran as a second credit)", got)
	}
}

// TestRebalance_ATakeResentAfterAStallRunsOnce: the same fault on
// Rebalance's take: a take that ran twice loses the units of the second.
func TestRebalance_ATakeResentAfterAStallRunsOnce(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	c := testenv.NewLostReplyClient(t, p.Addr())
	direct := r.Client(t)
	q := newQuota(t, c, quota.WithShards(4))
	bg := timeout(t, time.Minute)
	if err := q.Set(bg, "warm", 8); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Deduct(bg, "warm", 2, "w"); err != nil {
		t.Fatal(err)
	}
	if err := q.Rebalance(bg, "warm"); err != nil { // loads take.lua and credit.lua
		t.Fatal(err)
	}
	// Shards [40 0 0 0]: Rebalance takes 30 from shard 0 in one call.
	for i, v := range []int{40, 0, 0, 0} {
		if err := direct.HSet(bg, fmt.Sprintf("%s{stock#%d}", quota.DefaultPrefix, i), "remain", v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	warmPool(t, c, 8)
	src, err := os.ReadFile("take.lua")
	if err != nil {
		t.Fatal(err)
	}
	arm, wait := stallAfterLostReply(t, r, p)
	c.AddHook(&testenv.BeforeScript{SHA: testenv.ScriptSHA(string(src)), Do: arm})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err = q.Rebalance(ctx, "stock")
	cancel()
	t.Logf("Rebalance under the fault: %v", err)
	if err == nil || !strings.Contains(err.Error(), "up to 30 more if this unanswered take ran") {
		t.Errorf("Rebalance with a take unanswered: %v; want an error saying the take may have moved 30 units", err)
	}
	wait()
	v, err := direct.HGet(bg, quota.DefaultPrefix+"{stock#0}", "remain").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if v < 10 {
		t.Fatalf("shard 0 holds %d after one take of 30 from 40: the take ran twice", v)
	}
}
