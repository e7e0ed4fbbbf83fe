package workerid_test

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/snowflake/workerid"
)

// syncBuffer is a bytes.Buffer safe for the cleanup goroutine's log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLease_DroppedWhileHeldIsReleased: a Lease (and the generator bound to it) dropped
// without Release must not renew and hold its slot forever: once garbage-collected it is
// counted, logged and released, so the slot is free for the next holder.
func TestLease_DroppedWhileHeldIsReleased(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			var logs syncBuffer
			var leaked atomic.Int64
			reg := s.registry(t, workerid.WithIdentity("auth-9", ""),
				workerid.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
				workerid.WithLeakedHook(func(c workerid.Claim) {
					if c.WorkerID == 9 {
						leaked.Add(1)
					}
				}))
			func() {
				l, err := reg.Claim(ctxT(t, 5*testTTL), "auth")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := bound(t, l).NextN(context.Background(), 10); err != nil {
					t.Fatal(err)
				}
			}()
			next := s.registry(t, workerid.WithIdentity("auth-9", ""))
			deadline := time.Now().Add(10 * testTTL) // the TTL alone never frees it: renewals continue
			for {
				runtime.GC()
				l, err := next.Claim(ctxT(t, 5*testTTL), "auth")
				if err == nil {
					_ = l.Release(context.Background())
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the dropped lease still holds its slot after %s: %v", 10*testTTL, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := leaked.Load(); n != 1 {
				t.Fatalf("leaked hook called %d times, want 1", n)
			}
			if out := logs.String(); !strings.Contains(out, "garbage-collected while held") || !strings.Contains(out, "worker_id=9") {
				t.Fatalf("leak not logged: %q", out)
			}
		})
	}
}
