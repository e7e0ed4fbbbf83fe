package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// quorumFault is what a store failure test does to a quorum's nodes.
type quorumFault struct {
	name string
	// proxied: the clients dial each node through a fault proxy.
	proxied bool
	// apply puts node i out of reach; restore brings it back.
	apply, restore func(t *testing.T, n *testenv.Redis, p *testenv.Proxy)
}

var (
	killNode = quorumFault{name: "killed",
		apply: func(t *testing.T, n *testenv.Redis, _ *testenv.Proxy) {
			if err := n.Kill(); err != nil {
				t.Fatal(err)
			}
		},
		restore: func(t *testing.T, n *testenv.Redis, _ *testenv.Proxy) {
			if err := n.Restart(); err != nil { // answers PING when it returns
				t.Fatal(err)
			}
		}}
	blackholeNode = quorumFault{name: "blackholed", proxied: true,
		apply:   func(_ *testing.T, _ *testenv.Redis, p *testenv.Proxy) { p.Blackhole(true) },
		restore: func(_ *testing.T, _ *testenv.Redis, p *testenv.Proxy) { p.Blackhole(false) }}
)

// quorumGoverned is Govern over a quorum redislock of three redis-servers,
// with its own registry and span recorder.
type quorumGoverned struct {
	nodes   []*testenv.Redis
	proxies []*testenv.Proxy // nil unless the fault is proxied
	admins  []*redis.Client  // straight to each node
	clients []*redis.Client  // the quorum's own clients (hooks may be added before the first Acquire)
	locker  *instrument.Governed
	reg     *prometheus.Registry
	spans   *tracetest.SpanRecorder
	log     *syncBuffer
}

// The node timeout: long enough that a node that is up answers within it
// on a loaded machine, short enough that a blackholed node costs little.
const quorumNodeTimeout = 2 * time.Second

func newQuorumGoverned(t *testing.T, fault quorumFault, p instrument.StoreFailurePolicy) *quorumGoverned {
	t.Helper()
	q := &quorumGoverned{reg: prometheus.NewRegistry(), spans: tracetest.NewSpanRecorder(), log: &syncBuffer{}}
	var cs []redis.UniversalClient
	for range 3 {
		n := testenv.NewRedis(t)
		q.nodes = append(q.nodes, n)
		q.admins = append(q.admins, testenv.NewRedisClient(t, n.Addr()))
		addr := n.Addr()
		if fault.proxied {
			px := testenv.NewProxy(t, addr)
			q.proxies = append(q.proxies, px)
			addr = px.Addr()
		}
		// As NewQuorum recommends: a dead node costs a refused
		// connection, not the node timeout.
		c := redis.NewClient(&redis.Options{
			Addr:                  addr,
			ContextTimeoutEnabled: true,
			MaxRetries:            1,
			DialTimeout:           5 * time.Second,
			ReadTimeout:           5 * time.Second,
			WriteTimeout:          5 * time.Second,
			DialerRetries:         1,
			DialerRetryTimeout:    time.Millisecond,
			// Past PoolSize failed dials go-redis probes the node on a
			// goroutine that outlives Close by up to a second (goleak).
			PoolSize: 64,
		})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
		q.clients = append(q.clients, c)
	}
	raw, err := redislock.NewQuorum(cs, redislock.WithNodeTimeout(quorumNodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	q.locker, err = instrument.NewGoverned(raw,
		instrument.WithTracerProvider(tp),
		instrument.WithRegisterer(q.reg),
		instrument.WithoutHeartbeat(),
		instrument.WithLogger(slog.New(slog.NewTextHandler(q.log, nil))),
		instrument.WithStoreFailure(p))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// put takes node i out of reach.
func (q *quorumGoverned) put(t *testing.T, fault quorumFault, i int) {
	t.Helper()
	fault.apply(t, q.nodes[i], q.proxy(i))
}

// bringBack brings node i back.
func (q *quorumGoverned) bringBack(t *testing.T, fault quorumFault, i int) {
	t.Helper()
	fault.restore(t, q.nodes[i], q.proxy(i))
}

func (q *quorumGoverned) proxy(i int) *testenv.Proxy {
	if q.proxies == nil {
		return nil
	}
	return q.proxies[i]
}

// hold makes node i's copy of key another owner's.
func (q *quorumGoverned) hold(t *testing.T, ctx context.Context, i int, key string) {
	t.Helper()
	if err := q.admins[i].Set(ctx, key, "someone-else 1 {}", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
}

// acquires is the acquire counter of result.
func (q *quorumGoverned) acquires(t *testing.T, result string) float64 {
	t.Helper()
	return counter(t, q.reg, "lockgov_lock_acquire_total", map[string]string{"result": result})
}

// degradedSpans counts the acquire spans marked lock.degraded.
func (q *quorumGoverned) degradedSpans() int {
	n := 0
	for _, sp := range q.spans.Ended() {
		for _, kv := range sp.Attributes() {
			if kv.Key == "lock.degraded" && kv.Value.AsBool() {
				n++
			}
		}
	}
	return n
}

// TestStoreFailure_QuorumOutOfReachIsAStoreFailureNotContention: a quorum
// redislock whose majority of nodes cannot be reached (killed: connection
// refused; blackholed: each node's own timeout) fails as a store that
// cannot be reached does, as docs/RELIABILITY.md says: FailClosed returns
// a transport error that is not ErrNotAcquired and counts result=error;
// FailOpen falls back to a process-local lock (fence 0), counted in
// lockgov_store_degraded_total and marked lock.degraded on the span. So
// does a node that answered that the lock is held when too few others
// answered to know whether a majority holds it.
func TestStoreFailure_QuorumOutOfReachIsAStoreFailureNotContention(t *testing.T) {
	t.Parallel()
	for _, fault := range []quorumFault{killNode, blackholeNode} {
		for _, c := range []struct {
			name string
			down []int // nodes put out of reach
			held []int // nodes where another owner holds the key
		}{
			{name: "all-nodes", down: []int{0, 1, 2}},
			{name: "a-majority", down: []int{0, 1}},
			{name: "a-majority-beside-a-node-that-says-held", down: []int{0, 1}, held: []int{2}},
		} {
			for _, p := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
				t.Run(fmt.Sprintf("%s/%s/%s", fault.name, c.name, p), func(t *testing.T) {
					t.Parallel()
					q := newQuorumGoverned(t, fault, p)
					ctx := withTimeout(t, 2*time.Minute)
					const key = "lock:order:1"
					for _, i := range c.held {
						q.hold(t, ctx, i, key)
					}
					for _, i := range c.down {
						q.put(t, fault, i)
					}
					lease, err := q.locker.Acquire(ctx, key, instrument.WithTTL(10*time.Second))
					degraded := degradedLocks(t, q.reg)
					if p == instrument.FailClosed {
						if err == nil {
							_ = lease.Release(ctx)
							t.Fatalf("fail closed, quorum out of reach: granted a lease (fence %d)", lease.Fence())
						}
						if errors.Is(err, instrument.ErrNotAcquired) || !storefail.Unavailable(err) {
							t.Errorf("fail closed: err = %v\nErrNotAcquired %v, storefail.Unavailable %v; want a transport error, not ErrNotAcquired",
								err, errors.Is(err, instrument.ErrNotAcquired), storefail.Unavailable(err))
						}
						if e, n := q.acquires(t, "error"), q.acquires(t, "not_acquired"); e != 1 || n != 0 {
							t.Errorf("acquires: error %v, not_acquired %v; want 1 and 0", e, n)
						}
						if degraded != 0 {
							t.Errorf("degraded = %v under fail closed, want 0", degraded)
						}
					} else {
						if err != nil {
							t.Fatalf("fail open, quorum out of reach: err = %v (ErrNotAcquired %v, storefail.Unavailable %v); want a process-local lease",
								err, errors.Is(err, instrument.ErrNotAcquired), storefail.Unavailable(err))
						}
						if lease.Fence() != 0 {
							t.Errorf("fence %d, want 0: a process-local lease", lease.Fence())
						}
						// The acquire span ends with the lease.
						if err := lease.Release(ctx); err != nil {
							t.Fatal(err)
						}
						if degraded != 1 {
							t.Errorf("degraded = %v, want 1", degraded)
						}
						if a := q.acquires(t, "acquired"); a != 1 {
							t.Errorf("acquires: acquired %v, want 1", a)
						}
						if n := q.degradedSpans(); n != 1 {
							t.Errorf("%d spans marked lock.degraded, want 1", n)
						}
						// The log line names the nodes that did not answer,
						// never the key.
						if line := q.log.String(); !strings.Contains(line, "nodes answered") || !strings.Contains(line, "node 0:") || strings.Contains(line, key) {
							t.Errorf("log = %q; want the nodes' errors and not the key", line)
						}
					}

					// The nodes return: the next Acquire goes to the
					// quorum again (a fence above 0), nothing degraded.
					for _, i := range c.down {
						q.bringBack(t, fault, i)
					}
					for _, i := range c.held {
						if err := q.admins[i].Del(ctx, key).Err(); err != nil {
							t.Fatal(err)
						}
					}
					back, err := q.locker.Acquire(ctx, key, instrument.WithTTL(10*time.Second))
					if err != nil {
						t.Fatalf("the nodes returned: %v", err)
					}
					if back.Fence() == 0 {
						t.Error("the nodes returned: fence 0, still process-local")
					}
					if err := back.Release(ctx); err != nil {
						t.Fatal(err)
					}
					if d := degradedLocks(t, q.reg); d != degraded {
						t.Errorf("degraded = %v after the nodes returned, want still %v", d, degraded)
					}
				})
			}
		}
	}
}

// TestStoreFailure_QuorumAnswersAndTheCallersDeadlineNeverDegrade: what
// stays ErrNotAcquired in quorum mode, under either policy, with nothing
// degraded: a majority answered that another owner holds the lock (the
// third node out of reach), and a caller whose own deadline ended while
// every node was blackholed (longer node timeout than the caller's
// deadline).
func TestStoreFailure_QuorumAnswersAndTheCallersDeadlineNeverDegrade(t *testing.T) {
	t.Parallel()
	for _, fault := range []quorumFault{killNode, blackholeNode} {
		for _, p := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
			t.Run(fmt.Sprintf("majority-held/%s/%s", fault.name, p), func(t *testing.T) {
				t.Parallel()
				q := newQuorumGoverned(t, fault, p)
				ctx := withTimeout(t, 2*time.Minute)
				const key = "lock:order:1"
				q.hold(t, ctx, 1, key)
				q.hold(t, ctx, 2, key)
				q.put(t, fault, 0)
				_, err := q.locker.Acquire(ctx, key, instrument.WithTTL(10*time.Second), instrument.FailFast())
				if !errors.Is(err, instrument.ErrNotAcquired) || storefail.Unavailable(err) {
					t.Errorf("a majority says held: err = %v, want ErrNotAcquired and no transport failure", err)
				}
				if n, e := q.acquires(t, "not_acquired"), q.acquires(t, "error"); n != 1 || e != 0 {
					t.Errorf("acquires: not_acquired %v, error %v; want 1 and 0", n, e)
				}
				if d := degradedLocks(t, q.reg); d != 0 {
					t.Errorf("degraded = %v, want 0", d)
				}
			})
		}
	}
	for _, p := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
		t.Run(fmt.Sprintf("callers-deadline/blackholed/%s", p), func(t *testing.T) {
			t.Parallel()
			q := newQuorumGoverned(t, blackholeNode, p)
			for i := range q.nodes {
				q.put(t, blackholeNode, i)
			}
			// Ends well before the node timeout: the caller's deadline,
			// not a node's, ends every node's call.
			ctx, cancel := context.WithTimeout(withTimeout(t, time.Minute), quorumNodeTimeout/4)
			defer cancel()
			_, err := q.locker.Acquire(ctx, "lock:order:1", instrument.WithTTL(10*time.Second))
			if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("caller's deadline ended: err = %v, want ErrNotAcquired with DeadlineExceeded", err)
			}
			if n, e := q.acquires(t, "not_acquired"), q.acquires(t, "error"); n != 1 || e != 0 {
				t.Errorf("acquires: not_acquired %v, error %v; want 1 and 0", n, e)
			}
			if d := degradedLocks(t, q.reg); d != 0 {
				t.Errorf("degraded = %v, want 0", d)
			}
		})
	}
}
