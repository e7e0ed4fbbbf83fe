package redisfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/instrument/fence/redisfence"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// The WAIT timeouts of replicaacktest, where no replica acknowledges and
// where one must through a link delayed by linkLatency.
const (
	ackTimeout        = replicaacktest.AckTimeout
	healthyAckTimeout = replicaacktest.HealthyAckTimeout
	linkLatency       = replicaacktest.LinkLatency
)

// ttls are the two kinds of fenced value: one that expires, and one kept
// until overwritten (TTL 0), whose fence key has no TTL either.
var ttls = []struct {
	name string
	ttl  time.Duration
}{{"ttl", time.Minute}, {"no-ttl", 0}}

func newAckedWriter(t testing.TB, c redis.UniversalClient, n int, timeout time.Duration) *redisfence.Writer {
	t.Helper()
	w, err := redisfence.New(c, redisfence.WithReplicaAcks(n, timeout))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// wantNotReplicated fails the test unless err holds a *NotReplicatedError
// saying 0 of 1 replicas acknowledged within ackTimeout, and is not a
// refusal: the write is on the primary.
func wantNotReplicated(t *testing.T, what string, err error) {
	t.Helper()
	var nr *redisfence.NotReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, redisfence.ErrNotReplicated) {
		t.Fatalf("%s = %v; want a *NotReplicatedError", what, err)
	}
	replicaacktest.WantCounts(t, what, nr.Acked, nr.Wanted, nr.Timeout)
	if errors.Is(err, fence.ErrStaleFence) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s = %v; want neither a refusal nor a deadline", what, err)
	}
}

// wantValue fails the test unless w reads value under fence f at
// failoverKey.
func wantValue(t *testing.T, ctx context.Context, what string, w *redisfence.Writer, value string, f uint64) {
	t.Helper()
	if v, got, err := w.Get(ctx, failoverKey); err != nil || v != value || got != f {
		t.Fatalf("%s: Get = %q %d %v; want %q under fence %d", what, v, got, err, value, f)
	}
}

// TestReplicaAcks_AnAcknowledgedWriteSurvivesFailoverAndRefusesTheStaleFence
// is TestFailover_DefaultLetsAStaleHolderWriteOnceMore with
// WithReplicaAcks(1, ...): the replication link delays every chunk by 300
// ms and is closed (in-flight chunks dropped) as soon as A's Set under
// fence 10 returns nil; the primary is killed and the replica promoted.
// The promoted replica has A's value under fence 10, and the stale
// holder's Set under fence 5 is refused there with fence 10 stored. With
// the option ignored (no WAIT), Set returns before the delayed write
// reaches the replica and the close drops it: fence 5 is accepted. A value
// without a TTL must be acknowledged alike (its fence key has no TTL for
// the touch to rewrite).
func TestReplicaAcks_AnAcknowledgedWriteSurvivesFailoverAndRefusesTheStaleFence(t *testing.T) {
	for _, tc := range ttls {
		t.Run(tc.name, func(t *testing.T) {
			ctx := timeout(t, 2*time.Minute)
			rp := replicatedValue(t, ctx)
			w := newAckedWriter(t, testenv.NewRedisClient(t, rp.Primary.Addr()), 1, healthyAckTimeout)
			rp.Link.SetLatency(linkLatency)
			if err := w.Set(ctx, failoverKey, "A", 10, tc.ttl); err != nil {
				t.Fatalf("A's Set under fence 10 with a healthy replica = %v; want nil", err)
			}
			if err := rp.Link.Close(); err != nil { // replication ends here, in-flight chunks dropped
				t.Fatal(err)
			}
			promoted := newWriter(t, replicaacktest.FailOver(t, rp))
			wantValue(t, ctx, "the promoted replica", promoted, "A", 10)
			wantStale(t, promoted.Set(ctx, failoverKey, "stale", 5, tc.ttl), 10, 5)
			wantValue(t, ctx, "after the stale Set", promoted, "A", 10)
		})
	}
}

// TestReplicaAcks_AnUnacknowledgedWriteIsOnThePrimaryAndItsRetryIsAcknowledged:
// with the replication link cut (blackholed), A's Set under fence 10 is
// written on the primary, no replica acknowledges it, and Set returns an
// error holding *NotReplicatedError{Acked 0, Wanted 1, Timeout 500ms}: not
// nil, and not a refusal. The primary has the value. A stale holder's Set
// under fence 5 on the primary meanwhile is refused (StaleFenceError, not
// ErrNotReplicated: a refusal writes nothing and needs no replica). The
// switchover then promotes the replica, which lacks fence 10 (the old
// primary resyncs from it and loses it too): the write A was told was not
// safe is gone. A retries with the same fence and value: written and
// acknowledged (nil); fence 5 is then refused on the new primary.
func TestReplicaAcks_AnUnacknowledgedWriteIsOnThePrimaryAndItsRetryIsAcknowledged(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	rp := replicatedValue(t, ctx)
	w := newAckedWriter(t, testenv.NewRedisClient(t, rp.Primary.Addr()), 1, ackTimeout)
	rp.Link.Blackhole(true)
	wantNotReplicated(t, "A's Set under fence 10 with replication cut", w.Set(ctx, failoverKey, "A", 10, 0))
	wantValue(t, ctx, "the primary after ErrNotReplicated", w, "A", 10)
	wantStale(t, w.Set(ctx, failoverKey, "stale", 5, 0), 10, 5)

	rp.Switchover(t)
	w = newAckedWriter(t, testenv.NewRedisClient(t, rp.Primary.Addr()), 1, ackTimeout)
	wantValue(t, ctx, "the promoted replica", w, "first", 1)
	if err := w.Set(ctx, failoverKey, "A", 10, 0); err != nil {
		t.Fatalf("A's retry under fence 10 on the new primary = %v; want nil (written and acknowledged)", err)
	}
	wantStale(t, w.Set(ctx, failoverKey, "stale", 5, 0), 10, 5)
	rp.ReplicaHas(t, "A's retry", func(c *redis.Client) bool {
		v, f, err := newWriter(t, c).Get(ctx, failoverKey)
		return err == nil && v == "A" && f == 10
	})
}

// TestReplicaAcks_AResentSetIsAcknowledgedAgain: the reply of a Set's
// whole pipeline (set.lua, the touch, WAIT) is lost after it ran on the
// primary (the proxy drops it), and go-redis resends the pipeline on
// another connection after its 2 s read timeout. The resend finds its own
// fence and value stored and answers written without writing: it must
// still wait for the replica before Set reports success. With the replica
// stopped, Set returns ErrNotReplicated, not the resend's nil; with it
// running, nil, and the replica has the value. Then the retry is
// acknowledged once the replica is back.
func TestReplicaAcks_AResentSetIsAcknowledgedAgain(t *testing.T) {
	for _, tc := range ttls {
		for _, stopped := range []bool{false, true} {
			t.Run(tc.name+"/"+map[bool]string{false: "replica running", true: "replica stopped"}[stopped], func(t *testing.T) {
				ctx := timeout(t, 2*time.Minute)
				rp := replicatedValue(t, ctx)
				c, px := replicaacktest.ResendingClient(t, rp)
				w := newAckedWriter(t, c, 1, ackTimeout)
				if err := w.Set(ctx, "warm", "x", 1, tc.ttl); err != nil { // loads the scripts
					t.Fatal(err)
				}
				resume := func() {}
				if stopped {
					resume = rp.PauseReplica(t)
				}
				dropped := px.DropNextReply()
				err := w.Set(ctx, failoverKey, "A", 10, tc.ttl)
				replicaacktest.WantDropped(t, dropped)
				switch {
				case stopped:
					wantNotReplicated(t, "the resent Set with the replica stopped", err)
				case err != nil:
					t.Fatalf("the resent Set with the replica running = %v; want nil", err)
				}
				resume()
				rp.CaughtUp(t)
				rp.ReplicaHas(t, "A's value", func(c *redis.Client) bool {
					v, f, err := newWriter(t, c).Get(ctx, failoverKey)
					return err == nil && v == "A" && f == 10
				})
				if err := w.Set(ctx, failoverKey, "A", 10, tc.ttl); err != nil {
					t.Fatalf("the retry under fence 10 = %v; want nil (the same write, acknowledged)", err)
				}
			})
		}
	}
}

// TestReplicaAcks_AWaitWhoseReplyIsLostIsNotReplicated: the replica
// stopped, A's Set runs set.lua on the primary, which answers written, and
// the connection is killed (CLIENT KILL) while its WAIT blocks: the
// script's reply reached the client, the WAIT's never does. With retries
// off, or with testenv's one retry killed alike, go-redis stamps the
// WAIT's transport error on every command, set.lua's included. The value
// is on the primary: Set must say ErrNotReplicated (with the transport
// error: the counts are unknown), not a bare transport error that says
// nothing of the write. A stale holder's Set under fence 5 whose WAIT is
// killed alike is a refusal (StaleFenceError), heard from the primary.
// Once the replica is back, A's retry is acknowledged.
func TestReplicaAcks_AWaitWhoseReplyIsLostIsNotReplicated(t *testing.T) {
	for _, tc := range replicaacktest.LostWaits {
		t.Run(tc.Name, func(t *testing.T) {
			ctx := timeout(t, 2*time.Minute)
			rp := replicatedValue(t, ctx)
			w := newAckedWriter(t, replicaacktest.ClientWith(t, rp.Primary.Addr(), tc.Set), 1, healthyAckTimeout)
			if err := w.Set(ctx, "warm", "x", 1, 0); err != nil { // loads the scripts
				t.Fatal(err)
			}
			resume := rp.PauseReplica(t)
			set := func(value string, f uint64) error {
				errc := make(chan error, 1)
				go func() { errc <- w.Set(ctx, failoverKey, value, f, 0) }()
				for range tc.Kills {
					rp.Primary.KillBlockedIn(t, "wait")
				}
				return <-errc
			}
			err := set("A", 10)
			var nr *redisfence.NotReplicatedError
			if !errors.Is(err, redisfence.ErrNotReplicated) || errors.As(err, &nr) {
				t.Fatalf("A's Set whose WAIT reply was lost = %v; want ErrNotReplicated without counts", err)
			}
			wantStale(t, set("stale", 5), 10, 5)
			resume()
			rp.CaughtUp(t)
			if err := w.Set(ctx, failoverKey, "A", 10, 0); err != nil {
				t.Fatalf("A's retry = %v; want nil", err)
			}
		})
	}
}

// TestReplicaAcks_TheWaitFitsTheCallersDeadline: a caller whose deadline
// leaves less than the WAIT timeout gets a WAIT cut to it, and, with the
// replica stopped, an error wrapping context.DeadlineExceeded with the
// counts, not a WAIT that outlasts the caller.
func TestReplicaAcks_TheWaitFitsTheCallersDeadline(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	rp := replicatedValue(t, ctx)
	w := newAckedWriter(t, testenv.NewRedisClient(t, rp.Primary.Addr()), 1, healthyAckTimeout)
	rp.PauseReplica(t)
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := w.Set(dctx, failoverKey, "A", 10, 0)
	var nr *redisfence.NotReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Set = %v; want a *NotReplicatedError and context.DeadlineExceeded", err)
	}
	if nr.Timeout >= 2*time.Second || nr.Timeout <= 0 {
		t.Fatalf("WAIT was sent with %v; want less than the caller's 2s", nr.Timeout)
	}
}

// TestReplicaAcks_AWaitReplyAfterTheDeadlineIsTheDeadlineNotAStoreFailure:
// the WAIT is cut to the caller's deadline less the margin for its reply,
// and the reply comes later still (a proxy delays it 300 ms each way, as a
// loaded machine may): go-redis times the read out at the caller's
// deadline, after set.lua's answer. The value is on the primary; whether
// the replicas have it is unknown. Set must say so with a
// *NotReplicatedError that wraps context.DeadlineExceeded: not the bare
// i/o timeout, which storefail.Unavailable reads as a store failure.
func TestReplicaAcks_AWaitReplyAfterTheDeadlineIsTheDeadlineNotAStoreFailure(t *testing.T) {
	ctx := timeout(t, time.Minute)
	c := replicaacktest.LateWait(t, func(c *redis.Client) {
		// WAIT 1 1 on a server without replicas: loads set.lua and touch.lua.
		err := newAckedWriter(t, c, 1, time.Millisecond).Set(ctx, "warm", "w", 1, 0)
		if !errors.Is(err, redisfence.ErrNotReplicated) {
			t.Fatalf("the warm-up Set = %v; want ErrNotReplicated (no replica)", err)
		}
	})
	w := newAckedWriter(t, c, 1, healthyAckTimeout)
	dctx, cancel := context.WithTimeout(ctx, replicaacktest.LateWaitDeadline)
	defer cancel()
	err := w.Set(dctx, failoverKey, "A", 10, 0)
	var nr *redisfence.NotReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redisfence.ErrNotReplicated) {
		t.Fatalf("Set = %v; want a *NotReplicatedError and context.DeadlineExceeded", err)
	}
	if storefail.Unavailable(err) {
		t.Fatalf("Set = %v reads as a store failure", err)
	}
	wantValue(t, ctx, "after the late WAIT", w, "A", 10)
}

// TestReplicaAcks_DefaultSendsWhatItSentBefore: without WithReplicaAcks, a
// write, the same write again and a refused write each send one EVALSHA,
// alone, as before the option existed: no pipeline, no WAIT, no touch.
// With it, each is one pipeline of set.lua, the touch and WAIT (the
// control: the hook sees pipelines).
func TestReplicaAcks_DefaultSendsWhatItSentBefore(t *testing.T) {
	ctx := timeout(t, time.Minute)
	rp := replicatedValue(t, ctx)
	for _, tc := range []struct {
		name  string
		opts  []redisfence.Option
		sent  string
		piped string
	}{
		{"default", nil, "evalsha evalsha evalsha", ""},
		{"acks", []redisfence.Option{redisfence.WithReplicaAcks(1, healthyAckTimeout)}, "", "evalsha evalsha wait|evalsha evalsha wait|evalsha evalsha wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testenv.NewRedisClient(t, rp.Primary.Addr())
			w, err := redisfence.New(c, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			key := "stock:{" + tc.name + "}"
			if err := w.Set(ctx, key, "warm", 1, 0); err != nil { // loads the scripts: no NOSCRIPT shows
				t.Fatal(err)
			}
			h := &replicaacktest.Commands{}
			c.AddHook(h)
			for range 2 {
				if err := w.Set(ctx, key, "v", 2, 0); err != nil {
					t.Fatal(err)
				}
			}
			wantStale(t, w.Set(ctx, key, "old", 1, 0), 2, 1)
			h.WantSent(t, tc.sent, tc.piped)
		})
	}
}

// TestReplicaAcks_AServerWithoutTheScriptsStillWaits: after SCRIPT FLUSH
// (a restarted or failed-over server), a Set with WithReplicaAcks that has
// run its scripts before (a new Writer sends them with EVAL) falls back to
// EVAL for set.lua and the touch, with its own WAIT: it fails with
// *NotReplicatedError, not NOSCRIPT, with the replica stopped. The WAIT
// behind the NOSCRIPT waited the whole timeout (0 of 1), so the EVAL's
// WAIT gets what it left: a millisecond, not a second timeout. A new
// Writer on a server without the scripts waits once, the whole timeout.
func TestReplicaAcks_AServerWithoutTheScriptsStillWaits(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	rp := replicatedValue(t, ctx)
	c := testenv.NewRedisClient(t, rp.Primary.Addr())
	w := newAckedWriter(t, c, 1, ackTimeout)
	if err := w.Set(ctx, "warm", "w", 1, 0); err != nil {
		t.Fatalf("Set with the replica up: %v", err)
	}
	flush := func() {
		t.Helper()
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	rp.PauseReplica(t)
	// A write the stopped replica lacks: every WAIT from here on (WAIT
	// waits for the primary's offset, Redis 7.0) waits its whole timeout.
	if err := c.Set(ctx, "after-the-pause", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := w.Set(ctx, failoverKey, "A", 10, 0)
	var nr *redisfence.NotReplicatedError
	if !errors.As(err, &nr) || nr.Acked != 0 || nr.Wanted != 1 || nr.Timeout != time.Millisecond || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Set after SCRIPT FLUSH with the replica stopped = %v; want 0 of 1 within the 1ms the NOSCRIPT's WAIT left, no deadline", err)
	}
	wantValue(t, ctx, "the primary", w, "A", 10)
	flush()
	wantNotReplicated(t, "a new Writer's Set on a server without the scripts", newAckedWriter(t, c, 1, ackTimeout).Set(ctx, failoverKey, "B", 11, 0))
	wantValue(t, ctx, "the primary", w, "B", 11)
}

// TestWithReplicaAcks_RefusesBadValuesAndClientsWithoutOneConnection: New
// refuses each bad use of WithReplicaAcks with an error naming it.
func TestWithReplicaAcks_RefusesBadValuesAndClientsWithoutOneConnection(t *testing.T) {
	c := replicaacktest.WantRefusals(t, func(c redis.UniversalClient, opt redisfence.Option) error {
		_, err := redisfence.New(c, opt)
		return err
	}, []replicaacktest.Refusal[redisfence.Option]{
		{Name: "no replica", Opt: redisfence.WithReplicaAcks(0, time.Second), Want: "redisfence: WithReplicaAcks(0, 1s): replica count 0 must be >= 1"},
		{Name: "negative count", Opt: redisfence.WithReplicaAcks(-1, time.Second), Want: "replica count -1 must be >= 1"},
		{Name: "zero timeout", Opt: redisfence.WithReplicaAcks(1, 0), Want: "timeout 0s must be > 0"},
		{Name: "timeout at the read timeout", Opt: redisfence.WithReplicaAcks(1, 5*time.Second), Want: "timeout 5s must be at most 4.75s"},
		{Name: "cluster", Opt: redisfence.WithReplicaAcks(1, time.Second), Cluster: true, Want: "needs a *redis.Client"},
	})
	if _, err := redisfence.New(c, redisfence.WithReplicaAcks(1, 4750*time.Millisecond)); err != nil {
		t.Fatalf("New refused a timeout of ReadTimeout less the margin: %v", err)
	}
	if _, err := redisfence.New(c, nil); err != nil {
		t.Fatalf("New with a nil option: %v", err)
	}
}
