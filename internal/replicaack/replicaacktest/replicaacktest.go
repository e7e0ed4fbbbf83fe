// Package replicaacktest is the test setup that quota's and idempotency's
// WithReplicaAcks tests share: the WAIT timeouts they use, a hook that
// records what a client sends, the failover, the writers that run through
// a flapping replica until the link is cut, the clients that lose a reply,
// and the refusals of bad options. It runs real servers (internal/testenv)
// and is imported by tests only.
package replicaacktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
)

// AckTimeout is the WAIT timeout where no replica acknowledges: short,
// since a stopped replica costs every write the whole of it.
// HealthyAckTimeout is the WAIT timeout where a replica must acknowledge
// through a link delayed by LinkLatency each way: well under the 5 s read
// timeout of testenv's clients less the 250 ms margin.
const (
	AckTimeout        = 500 * time.Millisecond
	HealthyAckTimeout = 4 * time.Second
	LinkLatency       = 300 * time.Millisecond
)

// Commands is a hook that records the commands a client sends alone and
// in pipelines.
type Commands struct {
	mu    sync.Mutex
	sent  []string
	piped [][]string
	waits []string // the timeout argument of each WAIT pipelined
}

// DialHook passes dials through.
func (h *Commands) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook records a command sent alone.
func (h *Commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.sent = append(h.sent, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook records a pipeline's commands.
func (h *Commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		var waits []string
		for i, c := range cmds {
			names[i] = c.Name()
			if a := c.Args(); c.Name() == "wait" && len(a) == 3 {
				waits = append(waits, fmt.Sprint(a[2]))
			}
		}
		h.mu.Lock()
		h.piped = append(h.piped, names)
		h.waits = append(h.waits, waits...)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// Sent is the commands sent alone, separated by spaces.
func (h *Commands) Sent() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.sent, " ")
}

// Piped is the pipelines sent, their commands separated by spaces and the
// pipelines by "|", without a new connection's handshake (CLIENT, HELLO).
func (h *Commands) Piped() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var piped []string
	for _, p := range h.piped {
		if p[0] != "client" && p[0] != "hello" {
			piped = append(piped, strings.Join(p, " "))
		}
	}
	return strings.Join(piped, "|")
}

// Waits is the timeouts (ms) of the WAITs pipelined, separated by spaces.
func (h *Commands) Waits() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.waits, " ")
}

// WantSent fails the test unless h saw sent alone and piped in pipelines.
func (h *Commands) WantSent(t testing.TB, sent, piped string) {
	t.Helper()
	if got := h.Sent(); got != sent {
		t.Errorf("commands sent alone: %q, want %q", got, sent)
	}
	if got := h.Piped(); got != piped {
		t.Errorf("pipelines: %q, want %q", got, piped)
	}
}

// FailOver kills rp's primary, promotes its replica and returns a client
// of it: the client a failover points the caller at.
func FailOver(t testing.TB, rp *testenv.Replicated) *redis.Client {
	t.Helper()
	if err := rp.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	rp.Promote(t)
	return testenv.NewRedisClient(t, rp.Replica.Addr())
}

// WantCounts fails the test unless a NotReplicatedError's counts say 0 of
// 1 replicas acknowledged within AckTimeout.
func WantCounts(t testing.TB, what string, acked, wanted int, timeout time.Duration) {
	t.Helper()
	if acked != 0 || wanted != 1 || timeout != AckTimeout {
		t.Fatalf("%s: %d of %d replicas within %v; want 0 of 1 within %v", what, acked, wanted, timeout, AckTimeout)
	}
}

// MidFlight runs call with fresh ids ("<prefix>-<writer>-<n>") from four
// writers while rp's replica is stopped and resumed at random and the
// replication link delays every chunk by 20 ms. Once 40 calls have
// returned nil, with calls still in flight, it closes the link (in-flight
// chunks dropped), stops the writers and returns the ids whose call
// returned nil; the caller fails over and checks them. A call's error
// other than notReplicated fails the test.
func MidFlight(t *testing.T, ctx context.Context, rp *testenv.Replicated, prefix string, notReplicated error, call func(ctx context.Context, id string) error) []string {
	t.Helper()
	rp.Link.SetLatency(20 * time.Millisecond)
	var mu sync.Mutex
	var done []string // ids whose call returned nil
	var refused int
	enough := make(chan struct{})
	var closeEnough sync.Once
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("%s-%d-%d", prefix, w, i)
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := call(cctx, id)
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					done = append(done, id)
					if len(done) == 40 {
						closeEnough.Do(func() { close(enough) })
					}
				case errors.Is(err, notReplicated):
					refused++
				default:
					t.Errorf("%s: %v", id, err)
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
	t.Logf("%d calls acknowledged, %d not replicated", len(done), refused)
	return done
}

// ClientWith is testenv's client of addr with the options set changes.
func ClientWith(t testing.TB, addr string, set func(o *redis.Options)) *redis.Client {
	t.Helper()
	o := *testenv.NewRedisClient(t, addr).Options()
	set(&o)
	c := redis.NewClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// LostWait is a way a WAIT's reply is lost when the connection blocked in
// it is killed (testenv's Redis.KillBlockedIn, Kills times): Set makes
// ClientWith's client retry the pipeline or not.
type LostWait struct {
	Name  string
	Kills int
	Set   func(o *redis.Options)
}

// LostWaits: with retries off, one kill; with testenv's one retry, its
// resent pipeline killed too.
var LostWaits = []LostWait{
	{"no retries", 1, func(o *redis.Options) { o.MaxRetries = -1 }},
	{"the retry killed too", 2, func(*redis.Options) {}},
}

// ResendingClient is a client of rp's primary through a proxy, with a 2 s
// read timeout and two retries: armed with DropNextReply, the proxy loses
// a reply after its commands ran and go-redis resends them on another
// connection within the test. The timeouts fit WithReplicaAcks(1,
// AckTimeout).
func ResendingClient(t testing.TB, rp *testenv.Replicated) (*redis.Client, *testenv.Proxy) {
	t.Helper()
	px := testenv.NewProxy(t, rp.Primary.Addr())
	return ClientWith(t, px.Addr(), func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 2*time.Second, 2 }), px
}

// WantDropped fails the test unless the proxy has dropped the reply it was
// armed for (the scenario happened).
func WantDropped(t testing.TB, dropped <-chan struct{}) {
	t.Helper()
	select {
	case <-dropped:
	default:
		t.Fatal("no reply was dropped: the scenario did not happen")
	}
}

// Refusal is a bad use of WithReplicaAcks: the option, on a ClusterClient
// or on testenv's client of one node (ReadTimeout 5s), and a part of the
// error New must return.
type Refusal[O any] struct {
	Name    string
	Opt     O
	Cluster bool
	Want    string
}

// WantRefusals fails the test unless newWith refuses each of cases with an
// error containing its Want, and returns the client of one node it used.
func WantRefusals[O any](t *testing.T, newWith func(c redis.UniversalClient, opt O) error, cases []Refusal[O]) *redis.Client {
	t.Helper()
	c := testenv.NewRedis(t).Client(t)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{c.Options().Addr}})
	t.Cleanup(func() { _ = cluster.Close() })
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			var on redis.UniversalClient = c
			if tc.Cluster {
				on = cluster
			}
			err := newWith(on, tc.Opt)
			if err == nil || !strings.Contains(err.Error(), tc.Want) {
				t.Fatalf("New = %v; want an error containing %q", err, tc.Want)
			}
		})
	}
	return c
}

// LateWaitLatency is the delay, each way, of LateWait's proxy once set:
// a WAIT cut to a caller's deadline less the 250 ms margin for its reply
// answers at the earliest 2×LateWaitLatency-250ms = 350 ms after that
// deadline, every time, whatever the load (a load only delays it more).
const LateWaitLatency = 300 * time.Millisecond

// LateWait is a client (testenv's: its reads end at the caller's deadline)
// of a new server without replicas, where WAIT 1 blocks for its whole
// timeout, through a proxy. The test runs warm, a call that loads the
// scripts and makes the client's connection, and then delays the proxy by
// LateWaitLatency: a call with WithReplicaAcks(1, HealthyAckTimeout) under
// a deadline of LateWaitDeadline then has its script's answer long before
// the deadline and its WAIT's reply after it.
func LateWait(t testing.TB, warm func(c *redis.Client)) *redis.Client {
	t.Helper()
	px := testenv.NewProxy(t, testenv.NewRedis(t).Addr())
	c := testenv.NewRedisClient(t, px.Addr())
	warm(c)
	px.SetLatency(LateWaitLatency)
	return c
}

// LateWaitDeadline is the caller's deadline for LateWait: its call's
// script answers within 3×LateWaitLatency (request, script's reply,
// touch's), well inside it.
const LateWaitDeadline = 3 * time.Second
