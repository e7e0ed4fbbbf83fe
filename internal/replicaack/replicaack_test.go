package replicaack_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/leakcheck"
	"github.com/lockgov/lockgov/internal/replicaack"
	"github.com/lockgov/lockgov/internal/testenv"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

// incr counts its runs in KEYS[1] (with a TTL, so that the touch writes it) and answers
// the count.
var incr = redis.NewScript(`local n = redis.call('INCR', KEYS[1]); redis.call('PEXPIRE', KEYS[1], 60000); return n`)

// TestRun_AResendThatFindsNoScriptAnswersItsOwnRunNotTheFirstTrys: a script answers (its
// first run: 1) and its connection is killed while the WAIT after it blocks, the replica
// stopped. go-redis resends the pipeline on a new connection to a server that no longer
// has the script (SCRIPT FLUSH as the resend dials, as after a failover to a replica that
// never loaded it): the resend's EVALSHA is NOSCRIPT and Run sends the script again with
// EVAL, which runs it a second time. Run must answer that run (2): not the first try's
// answer, which heard() keeps only on a command no later try overwrote.
func TestRun_AResendThatFindsNoScriptAnswersItsOwnRunNotTheFirstTrys(t *testing.T) {
	rp := testenv.NewReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := testenv.NewRedisClient(t, rp.Primary.Addr())
	var armed atomic.Bool // the first try's WAIT blocks: the next dial is the resend's
	var flushed atomic.Bool
	o := *admin.Options()
	o.MaxRetries = 1
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if armed.CompareAndSwap(true, false) {
			if err := admin.ScriptFlush(ctx).Err(); err != nil {
				return nil, err
			}
			flushed.Store(true)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	c := redis.NewClient(&o)
	defer c.Close()
	if err := incr.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	rp.CaughtUp(t)
	resume := rp.PauseReplica(t)
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		cmd, _ := replicaack.Acks{N: 1, Timeout: 2 * time.Second}.Run(ctx, ctx, c, incr, []string{"runs"}, "runs")
		v, err := cmd.Result()
		done <- result{v, err}
	}()
	testenv.WaitFor(t, 30*time.Second, "the first try's script to run and its WAIT to block", func() bool {
		list, err := admin.ClientList(ctx).Result()
		return err == nil && strings.Contains(list, "cmd=wait") && admin.Exists(ctx, "runs").Val() == 1
	})
	armed.Store(true)
	rp.Primary.KillBlockedIn(t, "wait")
	resume()
	res := <-done
	if !flushed.Load() {
		t.Fatal("no resend dialled: the scenario did not happen")
	}
	runs, err := admin.Get(ctx, "runs").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if res.err != nil || res.v != int64(2) || runs != 2 {
		t.Fatalf("Run answered %v, %v with the script run %d times; want 2, its second run's answer", res.v, res.err, runs)
	}
}

// TestRun_ARecordWithoutATTLIsTouchedAndKeepsNoTTL: a script that wrote a
// record kept until overwritten (no TTL: redisfence's value written with
// TTL 0) is acknowledged like one with a TTL: the touch rewrites it
// (PEXPIRE then PERSIST, both replicated), WAIT counts the replica, and the
// record has no TTL afterwards on the primary and on the replica. The old
// touch wrote nothing on such a record and every write read as not
// replicated. A missing record is still not touched (0 acknowledgements).
func TestRun_ARecordWithoutATTLIsTouchedAndKeepsNoTTL(t *testing.T) {
	rp := testenv.NewReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := testenv.NewRedisClient(t, rp.Primary.Addr())
	set := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1]); return 1`)
	read := redis.NewScript(`return redis.call('GET', KEYS[1])`)
	acks := replicaack.Acks{N: 1, Timeout: 4 * time.Second}
	for _, s := range []*redis.Script{set, read} { // a write, then a script that wrote nothing
		cmd, r := acks.Run(ctx, ctx, c, s, []string{"kept"}, "kept", "v")
		if cmd.Err() != nil || r.Err != nil || r.Acked != 1 {
			t.Fatalf("Run on a record without a TTL = %v, %+v; want 1 acknowledgement", cmd.Err(), r)
		}
	}
	rc := testenv.NewRedisClient(t, rp.Replica.Addr())
	for name, cl := range map[string]*redis.Client{"primary": c, "replica": rc} {
		if ttl, err := cl.PTTL(ctx, "kept").Result(); err != nil || ttl != -1 {
			t.Fatalf("the %s's record has PTTL %v, %v after the touch; want -1 (no TTL)", name, ttl, err)
		}
		if v, err := cl.Get(ctx, "kept").Result(); err != nil || v != "v" {
			t.Fatalf("the %s's record = %q, %v; want v", name, v, err)
		}
	}
	if _, r := acks.Run(ctx, ctx, c, read, []string{"missing"}, "missing"); r.Err != nil || r.Acked != 0 {
		t.Fatalf("Run on a missing record = %+v; want 0 acknowledgements (nothing touched)", r)
	}
}
