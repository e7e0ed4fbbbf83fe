package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
)

// ackedGatedCombiner is gatedCombiner on a primary with one replica in sync
// (the replica returned to pause it), the combiner sending WAIT 1 ackTimeout
// after the calls that ask for it. Every pipeline sent through the client is
// recorded (pipes: the commands, which hold their replies once sent). The
// scripts are loaded, so that no EVALSHA falls back to EVAL in a batch.
func ackedGatedCombiner(t *testing.T, ackTimeout time.Duration) (*testenv.Redis, *redis.Client, *combiner, *gateHook, func() [][]redis.Cmder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary := testenv.NewRedis(t, testenv.WithRedisArgs("--repl-diskless-sync-delay", "0"))
	_, port, _ := strings.Cut(primary.Addr(), ":")
	replica := testenv.NewRedis(t, testenv.WithRedisArgs("--replicaof", "127.0.0.1", port))
	c := redis.NewClient(&redis.Options{Addr: primary.Addr(), ContextTimeoutEnabled: true, MaxRetries: 1,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	// The primary counts the replica once it has acknowledged an offset.
	testenv.WaitFor(t, 30*time.Second, "the replica to sync and be counted", func() bool {
		return c.Wait(ctx, 1, 50*time.Millisecond).Val() == 1
	})
	for _, src := range []string{acquireSrcFull, releaseSrcFull, refreshSrc} {
		if err := c.ScriptLoad(ctx, src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var pipes [][]redis.Cmder
	h := &gateHook{gate: make(chan struct{}), pipes: make(chan int, 16), beforePipe: func(cmds []redis.Cmder) {
		mu.Lock()
		pipes = append(pipes, cmds)
		mu.Unlock()
	}}
	c.AddHook(h)
	recorded := func() [][]redis.Cmder {
		mu.Lock()
		defer mu.Unlock()
		return append([][]redis.Cmder(nil), pipes...)
	}
	return replica, c, newCombiner(c, replicaAcks{n: 1, timeout: ackTimeout, set: true}), h, recorded
}

func newTestRequest(t *testing.T, key string) *request {
	t.Helper()
	keys, err := keysFor(key)
	if err != nil {
		t.Fatal(err)
	}
	return &request{keys: keys, tok: newToken(), ttl: time.Minute, meta: `{"t":1`, fenceTTL: 2 * time.Minute}
}

// batchOutcome is what one call of a mixed batch returned.
type batchOutcome struct {
	name string
	r    *request // acquires and the release
	att  attempt
	ok   bool
	err  error
	incr *redis.IntCmd
}

// runMixedBatch holds maxInFlight plain sends on the wire, queues, in this
// order, acquire A0, the release of a lock held before, acquire A1, a plain
// INCR, acquire A2 and a second release (so the queue neither starts nor
// ends with a call that asks for a WAIT), opens the gate and returns what
// every queued call returned and the pipeline that carried them.
// beforeBatch, if not nil, runs once the locks to release are taken.
func runMixedBatch(t *testing.T, ctx context.Context, c *redis.Client, b *combiner, h *gateHook, recorded func() [][]redis.Cmder, prefix string, beforeBatch func()) ([]batchOutcome, []redis.Cmder) {
	t.Helper()
	s := node{c: c, send: b, waiterTTL: 5 * time.Second, acks: b.acks}
	// Two locks to release in the batch, taken before with a WAIT a healthy
	// replica answers in time on a loaded machine (b's may be short).
	pre := node{c: c, send: newCombiner(c, replicaAcks{n: 1, timeout: 2 * time.Second, set: true}), waiterTTL: 5 * time.Second, acks: replicaAcks{n: 1, timeout: 2 * time.Second, set: true}}
	held := make([]*request, 2)
	for i := range held {
		held[i] = newTestRequest(t, fmt.Sprintf("%s:held:%d", prefix, i))
		if a, err := pre.attempt(ctx, held[i]); err != nil || !a.acquired {
			t.Fatalf("taking the lock to release in the batch: %+v, %v", a, err)
		}
	}
	if beforeBatch != nil {
		beforeBatch()
	}
	direct := holdDirectSends(t, ctx, b)

	out := make([]batchOutcome, 6)
	var wg sync.WaitGroup
	queue := func(i int, name string, call func(o *batchOutcome)) {
		out[i].name = name
		wg.Go(func() { call(&out[i]) })
		waitState(t, ctx, b, name+" queued", func() bool { return len(b.queue) == i+1 })
	}
	acquire := func(o *batchOutcome) { o.att, o.err = s.attempt(ctx, o.r) }
	release := func(o *batchOutcome) { o.ok, o.err = s.release(ctx, o.r) }
	out[0].r = newTestRequest(t, prefix+":a0")
	queue(0, "acquire A0", acquire)
	out[1].r = held[0]
	queue(1, "release R0", release)
	out[2].r = newTestRequest(t, prefix+":a1")
	queue(2, "acquire A1", acquire)
	queue(3, "INCR", func(o *batchOutcome) {
		o.incr = redis.NewIntCmd(ctx, "incr", prefix+":plain")
		o.err = b.Process(ctx, o.incr)
	})
	out[4].r = newTestRequest(t, prefix+":a2")
	queue(4, "acquire A2", acquire)
	out[5].r = held[1]
	queue(5, "release R1", release)

	before := len(recorded())
	close(h.gate)
	for _, r := range direct {
		if err := (<-r).Err(); err != nil {
			t.Fatalf("a direct send: %v", err)
		}
	}
	wg.Wait()
	var batch []redis.Cmder
	for _, p := range recorded()[before:] {
		if len(p) > 2 {
			if batch != nil {
				t.Fatalf("two pipelines of queued calls (%d and %d commands), want one batch", len(batch), len(p))
			}
			batch = p
		}
	}
	if batch == nil {
		t.Fatalf("the queued calls went out in no batch (pipelines: %d)", len(recorded())-before)
	}
	return out, batch
}

// checkOneWaitEndsTheBatch: the batch is the six queued commands in queue
// order and exactly one WAIT, last, after every one of their writes.
func checkOneWaitEndsTheBatch(t *testing.T, batch []redis.Cmder) *redis.IntCmd {
	t.Helper()
	var names []string
	waits := 0
	for _, cmd := range batch {
		names = append(names, cmd.Name())
		if cmd.Name() == "wait" {
			waits++
		}
	}
	want := []string{"evalsha", "evalsha", "evalsha", "incr", "evalsha", "evalsha", "wait"}
	if strings.Join(names, " ") != strings.Join(want, " ") || waits != 1 {
		t.Fatalf("the batch sent %v, want the six queued commands then exactly one WAIT: %v", names, want)
	}
	wait, ok := batch[len(batch)-1].(*redis.IntCmd)
	if !ok {
		t.Fatalf("the WAIT is a %T", batch[len(batch)-1])
	}
	if args := wait.Args(); args[1] != 1 || args[2].(int64) <= 0 {
		t.Fatalf("WAIT %v: want WAIT 1 <timeout ms > 0>", args[1:])
	}
	return wait
}

// TestReplicaAcks_ABatchEndsWithOneWaitWhoseAnswerEveryAcquireGets: calls
// that ask for a WAIT (acquires) and calls that do not (releases, a plain
// command) meet in one combiner batch, the first and last of it not asking.
// The pipeline ends with exactly one WAIT, after every write of the batch;
// every acquire in it returns that WAIT's answer (its ack is the WAIT's
// count), and the calls that asked for none return their own reply. With
// the replica healthy every acquire is granted and the replica has each
// lock; with it stopped every acquire fails with ErrNotReplicated, while
// the releases and the INCR, which asked for no acknowledgement, succeed.
func TestReplicaAcks_ABatchEndsWithOneWaitWhoseAnswerEveryAcquireGets(t *testing.T) {
	t.Parallel()
	for _, stopped := range []bool{false, true} {
		name := map[bool]string{false: "replica-healthy", true: "replica-stopped"}[stopped]
		t.Run(name, func(t *testing.T) {
			ackTimeout := 2 * time.Second // a healthy replica on a loaded machine
			if stopped {
				ackTimeout = 300 * time.Millisecond
			}
			replica, c, b, h, recorded := ackedGatedCombiner(t, ackTimeout)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var stop func()
			if stopped {
				stop = func() {
					if err := replica.Pause(); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = replica.Resume() })
				}
			}
			out, batch := runMixedBatch(t, ctx, c, b, h, recorded, "lock:acks-batch-"+name, stop)
			wait := checkOneWaitEndsTheBatch(t, batch)
			wantAcks := int64(1)
			if stopped {
				wantAcks = 0
			}
			if n, err := wait.Result(); err != nil || n != wantAcks {
				t.Fatalf("the batch's WAIT answered %d, %v; want %d", n, err, wantAcks)
			}
			for _, o := range out {
				switch {
				case strings.HasPrefix(o.name, "acquire"):
					if o.r.ack.n != wantAcks || o.r.ack.err != nil || o.r.ack.cut {
						t.Errorf("%s: its ack is %+v, want the batch WAIT's answer %d", o.name, o.r.ack, wantAcks)
					}
					if !o.att.acquired {
						t.Errorf("%s: not acquired (%+v, %v): the lock was free", o.name, o.att, o.err)
					}
					if stopped {
						if !errors.Is(o.err, ErrNotReplicated) {
							t.Errorf("%s = %v with no replica acknowledging, want ErrNotReplicated", o.name, o.err)
						}
					} else if o.err != nil {
						t.Errorf("%s = %v with the replica acknowledging, want granted", o.name, o.err)
					}
				case strings.HasPrefix(o.name, "release"):
					if !o.ok || o.err != nil {
						t.Errorf("%s = %v, %v: a release asks for no acknowledgement", o.name, o.ok, o.err)
					}
				default:
					if n, err := o.incr.Result(); err != nil || n != 1 {
						t.Errorf("%s = %d, %v", o.name, n, err)
					}
				}
			}
			if stopped {
				return
			}
			// WAIT said the replica had every write before it: the
			// acquired locks and the released ones' absence.
			cr := redis.NewClient(&redis.Options{Addr: replica.Addr()})
			defer func() { _ = cr.Close() }()
			for _, o := range out {
				if o.r == nil {
					continue
				}
				got, err := cr.Get(ctx, o.r.keys.lock).Result()
				if strings.HasPrefix(o.name, "acquire") {
					if err != nil || !strings.HasPrefix(got, o.r.tok) {
						t.Errorf("%s: the replica has %q, %v; want the lock WAIT acknowledged", o.name, got, err)
					}
				} else if !errors.Is(err, redis.Nil) {
					t.Errorf("%s: the replica still has the released lock (%q, %v)", o.name, got, err)
				}
			}
		})
	}
}
