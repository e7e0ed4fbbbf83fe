package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// waitRecorder records the timeout argument (ms) of every WAIT sent
// through a client, alone or in a pipeline, and the commands of each
// pipeline that carried one.
type waitRecorder struct {
	passThrough
	mu     sync.Mutex
	ms     []int64
	before [][]string // per WAIT: the names of the commands before it in its pipeline
}

func (h *waitRecorder) record(cmds []redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, c := range cmds {
		if !strings.EqualFold(c.Name(), "wait") {
			continue
		}
		args := c.Args()
		ms, _ := strconv.ParseInt(strings.TrimSpace(toString(args[len(args)-1])), 10, 64)
		h.ms = append(h.ms, ms)
		var names []string
		for _, b := range cmds[:i] {
			names = append(names, strings.ToLower(b.Name()))
		}
		h.before = append(h.before, names)
	}
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

func (h *waitRecorder) sent() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int64(nil), h.ms...)
}

func (h *waitRecorder) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ms, h.before = nil, nil
}

func (h *waitRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *waitRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds)
		return next(ctx, cmds)
	}
}

// TestReplicaAcks_TheWaitSentFitsTheContextsDeadline: the caller's
// deadline (300ms) is far below the WAIT timeout (2s) and the replica is
// stopped. The WAIT sent must not wait longer than the context has left,
// so that its reply, not the context's deadline, ends the pipeline: with
// ContextTimeoutEnabled, a read cut by the deadline drops the connection;
// without it, nothing but the WAIT's own timeout bounds the read, and
// Acquire returned up to the whole WAIT timeout after its deadline. The
// Acquire fails as one whose deadline cut it (ErrNotAcquired and
// DeadlineExceeded, not a store failure), and the lock is given back.
func TestReplicaAcks_TheWaitSentFitsTheContextsDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	for _, m := range modes {
		for _, cte := range []bool{true, false} {
			t.Run(m.name+"/ContextTimeoutEnabled="+strconv.FormatBool(cte), func(t *testing.T) {
				ctx := timeout(t, 2*time.Minute)
				rp := newReplicated(t, ctx)
				h := &waitRecorder{}
				c := newClient(t, rp.primary.Addr(), func(o *redis.Options) {
					o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second
					o.ContextTimeoutEnabled = cte
				})
				c.AddHook(h)
				l := newLocker(t, c, append(m.opts, redislock.WithReplicaAcks(1, healthyAckTimeout))...)
				warmUp(t, ctx, l, instrument.FailFast())
				h.reset()
				rp.pauseReplica(t)

				const key = "lock:replica-acks-wait-fits-the-deadline"
				actx, cancel := context.WithTimeout(ctx, deadline)
				defer cancel()
				lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
				if err == nil {
					_ = lease.Release(ctx)
					t.Fatal("Acquire returned a lease no replica acknowledged")
				}
				sent := h.sent()
				if len(sent) == 0 {
					t.Fatalf("no WAIT sent (Acquire = %v)", err)
				}
				for _, ms := range sent {
					if time.Duration(ms)*time.Millisecond >= deadline {
						t.Fatalf("WAIT sent with timeout %dms under a context of %v: it outwaits the caller's deadline (all sent: %v)", ms, deadline, sent)
					}
				}
				if !errors.Is(err, instrument.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Acquire = %v, want ErrNotAcquired and the context's deadline", err)
				}
				testenv.WaitFor(t, giveBackWithin, "the give-back to end", func() bool {
					return redislock.PendingLeaves(l) == 0
				})
				if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
					t.Fatalf("the lock taken by the cut attempt is still on the primary (EXISTS %d)", n)
				}
			})
		}
	}
}
