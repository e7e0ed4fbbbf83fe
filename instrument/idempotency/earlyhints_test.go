package idempotency_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/idempotency"
)

// TestMiddleware_AnInformationalStatusIsNotTheResponse: a handler that sends
// 103 Early Hints before its final status. The client must get the final
// status, first and on replay, and a final 5xx must release the key. The
// recorder used to keep the 103 as the status: the client got 200 for a 201,
// and a 500 was stored as a success.
func TestMiddleware_AnInformationalStatusIsNotTheResponse(t *testing.T) {
	t.Parallel()
	var runs, final atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(int(final.Load()))
		_, _ = w.Write([]byte("body"))
	})
	srv := httptest.NewServer(idempotency.Middleware(newStore(t, single(t)))(h))
	t.Cleanup(srv.Close)
	post := func(key string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/pay", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(idempotency.Header, key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	final.Store(http.StatusCreated)
	if got := post("k-201"); got != http.StatusCreated {
		t.Errorf("103 then 201: the client got %d", got)
	}
	if got := post("k-201"); got != http.StatusCreated || runs.Load() != 1 {
		t.Errorf("replay of 103 then 201: %d, handler runs %d; want 201 replayed, 1 run", got, runs.Load())
	}

	final.Store(http.StatusInternalServerError)
	if got := post("k-500"); got != http.StatusInternalServerError {
		t.Errorf("103 then 500: the client got %d", got)
	}
	final.Store(http.StatusCreated)
	before := runs.Load()
	if got := post("k-500"); got != http.StatusCreated || runs.Load() != before+1 {
		t.Errorf("retry after 103 then 500: %d, handler runs %d; want the handler run again (5xx not stored)", got, runs.Load()-before)
	}
}

// TestMiddleware_AKeyTooLongForItsPrincipalIsABadRequest: a valid header key
// whose scoped form (with a long principal) is over MaxKeyBytes can never be
// stored; it used to be answered 503 with Retry-After, inviting retries that
// all fail the same way.
func TestMiddleware_AKeyTooLongForItsPrincipalIsABadRequest(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("p", idempotency.MaxKeyBytes)
	srv := newServer(t, idempotency.WithPrincipal(func(*http.Request) string { return long }))
	resp := srv.do(t, "POST", "/pay", strings.Repeat("k", idempotency.MaxHeaderKeyBytes), "", "x")
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Retry-After") != "" {
		t.Errorf("status %d, Retry-After %q; want 400 without Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := srv.runs.Load(); n != 0 {
		t.Errorf("handler ran %d times for a key that cannot be stored", n)
	}
}
