package idempotency_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestDo_Cluster: on a 3-primary Cluster, 100 concurrent Do calls on each
// of 20 keys (spread over the nodes) run each fn once.
func TestDo_Cluster(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	c := cl.Client(t)
	s := newStore(t, c)
	ctx := timeout(t, 3*time.Minute)
	var runs [20]atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for k := range 20 {
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.Do(ctx, "order-"+string(rune('a'+k)), nil, func(context.Context, idempotency.Attempt) ([]byte, error) {
					runs[k].Add(1)
					return []byte{byte(k)}, nil
				})
				if err != nil || len(res.Body) != 1 || res.Body[0] != byte(k) {
					failed.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d calls failed or got another key's result", n)
	}
	for k := range runs {
		if n := runs[k].Load(); n != 1 {
			t.Fatalf("key %d: fn ran %d times, want 1", k, n)
		}
	}
}

// TestMiddleware_FailsClosedWhenRedisIsDown: with Redis killed the
// middleware answers 503 with Retry-After and never runs the handler.
func TestMiddleware_FailsClosedWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	s := newStore(t, r.Client(t))
	var runs atomic.Int64
	h := idempotency.Middleware(s)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { runs.Add(1) }))
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("x"))
	req.Header.Set(idempotency.Header, "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || runs.Load() != 0 {
		t.Fatalf("with Redis down: %d, Retry-After %q, handler runs %d; want 503, set, 0", w.Code, w.Header().Get("Retry-After"), runs.Load())
	}
}
