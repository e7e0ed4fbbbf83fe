package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// retryDialHook runs fault, once, when the client dials while armed: the
// moment go-redis resends a command whose reply was lost (the connection
// it was sent on is discarded, and the pool holds no other). fault returns
// the dial's result; nil, nil dials as usual.
type retryDialHook struct {
	mu    sync.Mutex
	armed bool
	fired bool
	fault func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (h *retryDialHook) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = true
}

func (h *retryDialHook) didFire() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fired
}

func (h *retryDialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.mu.Lock()
		fire := h.armed
		h.armed, h.fired = false, h.fired || fire
		h.mu.Unlock()
		if fire {
			if c, err := h.fault(ctx, network, addr); c != nil || err != nil {
				return c, err
			}
		}
		return next(ctx, network, addr)
	}
}

func (h *retryDialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *retryDialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAcquire_AResentAttemptThatFailsOtherwiseStillGivesTheLockBack: the
// reply of an attempt that took the lock is lost and go-redis resends it
// (the caller's context lives on); the resend fails in a way that says it
// did not run: its dial is refused (the network broke after the first try),
// or Redis refuses it with an error reply (OOM: the first try's writes
// pushed the server over maxmemory). The error Acquire sees is the
// resend's, but the first try ran: the lock is taken under a token nobody
// holds. Only the error of the last try reaches Acquire, so its shape says
// nothing about the tries before it: the lock must be given back all the
// same, not kept for its whole TTL (an hour here).
func TestAcquire_AResentAttemptThatFailsOtherwiseStillGivesTheLockBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// fault breaks the resend; heal undoes it after Acquire returned.
		fault func(t *testing.T, admin *redis.Client) func(ctx context.Context, network, addr string) (net.Conn, error)
		heal  func(t *testing.T, admin *redis.Client)
		// check says whether Acquire's error is the resend's own.
		check func(err error) bool
	}{
		{
			name: "dial-refused",
			fault: func(t *testing.T, _ *redis.Client) func(ctx context.Context, network, addr string) (net.Conn, error) {
				port := testenv.ClosedPort(t)
				return func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", port))
				}
			},
			heal: func(*testing.T, *redis.Client) {},
			check: func(err error) bool {
				var op *net.OpError
				return errors.As(err, &op) && op.Op == "dial"
			},
		},
		{
			name: "error-reply",
			fault: func(t *testing.T, admin *redis.Client) func(ctx context.Context, network, addr string) (net.Conn, error) {
				return func(context.Context, string, string) (net.Conn, error) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
						t.Errorf("config set maxmemory: %v", err)
					}
					return nil, nil
				}
			},
			heal: func(t *testing.T, admin *redis.Client) {
				if err := admin.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
					t.Fatal(err)
				}
			},
			check: func(err error) bool { return redis.HasErrorPrefix(err, "OOM") },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, admin := setup(t)
			p := testenv.NewProxy(t, r.Addr())
			h := &retryDialHook{fault: tc.fault(t, admin)}
			c := newClient(t, p.Addr()) // MaxRetries 1: one resend
			c.AddHook(h)
			l := newLocker(t, c)
			other := newLocker(t, admin)
			ctx := timeout(t, time.Minute)
			ttl := instrument.WithTTL(time.Hour)

			// Scripts loaded and one connection pooled: the attempt goes
			// out on it, and the resend must dial.
			warmUp(t, ctx, l, ttl)
			if n := c.PoolStats().TotalConns; n != 1 {
				t.Fatalf("%d connections pooled after the warm-up, want 1", n)
			}

			const key = "lock:resent-attempt"
			dropped := p.DropNextReply()
			h.arm()
			// The context outlives the client's read timeout: go-redis
			// resends the attempt.
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			lease, err := l.Acquire(actx, key, ttl, instrument.FailFast())
			if err == nil {
				t.Fatalf("Acquire returned a lease (fence %d) although its reply was lost", lease.Fence())
			}
			select {
			case <-dropped:
			default:
				t.Fatalf("no reply was dropped; Acquire returned %v", err)
			}
			if !h.didFire() {
				t.Fatalf("the attempt was not resent on a new connection; Acquire returned %v", err)
			}
			if !tc.check(err) {
				t.Fatalf("Acquire = %v, want the resend's own error: the scenario did not happen", err)
			}
			t.Logf("Acquire: %v", err)
			tc.heal(t, admin)

			eventually(t, "the lock taken by the first try to be given back", func() bool {
				return admin.Exists(ctx, key).Val() == 0
			})
			got, err := other.Acquire(ctx, key, ttl, instrument.FailFast())
			if err != nil {
				t.Fatalf("another caller cannot take the lock: %v", err)
			}
			if err := got.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
