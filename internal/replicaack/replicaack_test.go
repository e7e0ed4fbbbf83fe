package replicaack_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/leakcheck"
	"github.com/lockgov/lockgov/internal/replicaack"
	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
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

// lateRun runs incr once on key through a proxy that delays every chunk by
// latency each way, with WAIT 1 and no replica, so that WAIT blocks for its
// whole timeout: its reply reaches the client at the earliest 2×latency
// after the WAIT's timeout, the script's long before. The scripts are
// loaded and the client's connection made before the latency is set, so
// neither a NOSCRIPT nor a handshake spends the latency.
func lateRun(t *testing.T, ctx context.Context, latency time.Duration, set func(o *redis.Options), acks replicaack.Acks, key string) (*redis.Cmd, replicaack.Reply) {
	t.Helper()
	r := testenv.NewRedis(t)
	px := testenv.NewProxy(t, r.Addr())
	o := *testenv.NewRedisClient(t, px.Addr()).Options()
	set(&o)
	c := redis.NewClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	// A WAIT of a millisecond: the warm-up loads the scripts (NOSCRIPT, then EVAL).
	if cmd, _ := (replicaack.Acks{N: 1, Timeout: time.Millisecond}).Run(ctx, ctx, c, incr, []string{"warm"}, "warm"); cmd.Err() != nil {
		t.Fatal(cmd.Err())
	}
	px.SetLatency(latency)
	return acks.Run(ctx, ctx, c, incr, []string{key}, key)
}

// notReplicatedError stands for the callers' *NotReplicatedError.
type notReplicatedError struct{ acked, wanted int }

func (e *notReplicatedError) Error() string {
	return fmt.Sprintf("not replicated: %d of %d", e.acked, e.wanted)
}

func (e *notReplicatedError) Is(target error) bool { return target == errNotReplicated }

var errNotReplicated = errors.New("not replicated")

func checkErr(acks replicaack.Acks, r replicaack.Reply) error {
	return acks.Check(r, errNotReplicated, func(acked, wanted int, _ time.Duration) error {
		return &notReplicatedError{acked, wanted}
	})
}

// TestRun_AWaitReplyLaterThanTheDeadlineIsTheDeadlineNotAStoreFailure:
// the WAIT's reply arrives after the caller's deadline (a loaded machine
// late by more than ReplyMargin; here a proxy's 300 ms each way, so at the
// earliest 350 ms after the deadline), and go-redis, whose read deadline
// is the caller's, reports an i/o timeout on the WAIT after reading the
// script's answer. The script ran; how many replicas have its write is
// unknown; the caller's deadline is why: Check must say so with the
// callers' typed error and context.DeadlineExceeded, not with the bare
// i/o timeout, which reads as a store failure (storefail.Unavailable).
func TestRun_AWaitReplyLaterThanTheDeadlineIsTheDeadlineNotAStoreFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
	defer dcancel()
	acks := replicaack.Acks{N: 1, Timeout: 4 * time.Second}
	cmd, r := lateRun(t, dctx, 300*time.Millisecond, func(*redis.Options) {}, acks, "late")
	if v, err := cmd.Result(); err != nil || v != int64(1) {
		t.Fatalf("the script = %v, %v; want 1, nil: it ran and answered before the deadline", v, err)
	}
	err := checkErr(acks, r)
	var nr *notReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errNotReplicated) {
		t.Fatalf("Check(%+v) = %v; want the typed error and context.DeadlineExceeded", r, err)
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		t.Fatalf("Check = %v: it holds the read timeout %v, which reads as a store failure", err, oe)
	}
	if !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("Check = %v; want it to say the replicas' count is unknown", err)
	}
}

// TestRun_AWaitReplyLostBeforeTheDeadlineStaysAStoreFailure: the control.
// The client's own read timeout (2 s) ends the read of a WAIT (2 s, its
// reply 600 ms late through the proxy) long before the caller's deadline
// (a minute): that is the store not answering in time, and Check reports
// it as ErrNotReplicated with the transport error, not as the deadline.
func TestRun_AWaitReplyLostBeforeTheDeadlineStaysAStoreFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acks := replicaack.Acks{N: 1, Timeout: 2 * time.Second}
	cmd, r := lateRun(t, ctx, 300*time.Millisecond, func(o *redis.Options) {
		o.ReadTimeout, o.MaxRetries = 2*time.Second, -1
	}, acks, "lost")
	if v, err := cmd.Result(); err != nil || v != int64(1) {
		t.Fatalf("the script = %v, %v; want 1, nil", v, err)
	}
	err := checkErr(acks, r)
	var oe *net.OpError
	if !errors.Is(err, errNotReplicated) || !errors.As(err, &oe) || !oe.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Check(%+v) = %v; want ErrNotReplicated with the read timeout, not the deadline", r, err)
	}
}

// TestRun_AScriptThatAnswersAnErrorIsKnownLoaded: a script whose answer is
// an error reply (quota's sold-out, a refused credit) ran: the server has
// it. Run took only an answer without error as proof, so such a script
// went out with EVAL, its whole source, on every call until one
// succeeded. A NOSCRIPT is still not proof (the control: after a flush
// the next call is EVAL again).
func TestRun_AScriptThatAnswersAnErrorIsKnownLoaded(t *testing.T) {
	rp := testenv.NewReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := testenv.NewRedisClient(t, rp.Primary.Addr())
	var h replicaacktest.Commands
	c.AddHook(&h)
	refuse := redis.NewScript(`redis.call('SET', KEYS[1], 'tried', 'PX', 60000); return redis.error_reply('SOLD_OUT')`)
	acks := replicaack.New(1, replicaacktest.HealthyAckTimeout)
	for range 2 {
		cmd, r := acks.Run(ctx, ctx, c, refuse, []string{"refused"}, "refused")
		if err := cmd.Err(); err == nil || !strings.Contains(err.Error(), "SOLD_OUT") || r.Err != nil {
			t.Fatalf("Run = %v, %+v; want the script's SOLD_OUT and the WAIT answered", err, r)
		}
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, r := acks.Run(ctx, ctx, c, refuse, []string{"refused"}, "refused"); r.Err != nil {
		t.Fatalf("Run after the flush: %+v", r)
	}
	if got, want := h.Piped(), "eval eval wait|evalsha evalsha wait|evalsha evalsha wait|eval eval wait"; got != want {
		t.Fatalf("pipelines: %q, want %q (EVALSHA once the script answered, even with an error; EVAL again after the NOSCRIPT)", got, want)
	}
}
