package idempotency_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/idempotency"
)

type server struct {
	*httptest.Server
	runs    atomic.Int64
	block   chan struct{} // when non-nil, the handler waits on it
	started chan struct{}
	status  atomic.Int64
}

func newServer(t *testing.T, opts ...idempotency.MiddlewareOption) *server {
	t.Helper()
	s := newStore(t, single(t))
	srv := &server{}
	srv.status.Store(http.StatusCreated)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := srv.runs.Add(1)
		if srv.block != nil {
			close(srv.started)
			<-srv.block
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Run", fmt.Sprint(n))
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.WriteHeader(int(srv.status.Load()))
		fmt.Fprintf(w, `{"run":%d,"echo":%q}`, n, body)
	})
	srv.Server = httptest.NewServer(idempotency.Middleware(s, opts...)(h))
	t.Cleanup(srv.Close)
	return srv
}

func (s *server) do(t *testing.T, method, path, key, principal, body string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(idempotency.Header, key)
	}
	if principal != "" {
		req.Header.Set("X-Tenant", principal)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// dump is the response as bytes on the wire.
func dump(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	b, err := httputil.DumpResponse(resp, true)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tenant(r *http.Request) string { return r.Header.Get("X-Tenant") }

func TestMiddleware_ReplaysTheFirstResponseByteForByte(t *testing.T) {
	t.Parallel()
	srv := newServer(t, idempotency.WithPrincipal(tenant))
	first := dump(t, srv.do(t, "POST", "/pay", "k-1", "acme", `{"amount":10}`))
	again := dump(t, srv.do(t, "POST", "/pay", "k-1", "acme", `{"amount":10}`))
	if !bytes.Equal(first, again) {
		t.Fatalf("replay differs:\nfirst:\n%s\nreplay:\n%s", first, again)
	}
	if !bytes.Contains(first, []byte("201 Created")) || !bytes.Contains(first, []byte("X-Multi: a\r\nX-Multi: b")) {
		t.Fatalf("unexpected first response:\n%s", first)
	}
	if n := srv.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestMiddleware_StatusCodes(t *testing.T) {
	t.Parallel()
	srv := newServer(t, idempotency.RequireKey(), idempotency.WithPrincipal(tenant))
	if got := srv.do(t, "POST", "/pay", "", "acme", "x").StatusCode; got != http.StatusBadRequest {
		t.Errorf("missing key: %d, want 400", got)
	}
	for _, k := range []string{strings.Repeat("k", idempotency.MaxHeaderKeyBytes+1), "has space", `""`} {
		if got := srv.do(t, "POST", "/pay", k, "acme", "x").StatusCode; got != http.StatusBadRequest {
			t.Errorf("malformed key %q: %d, want 400", k, got)
		}
	}
	if got := srv.do(t, "POST", "/pay", "k", "acme", "x").StatusCode; got != http.StatusCreated {
		t.Fatalf("first: %d", got)
	}
	for name, req := range map[string][3]string{
		"other body":   {"POST", "/pay", "y"},
		"other path":   {"POST", "/refund", "x"},
		"other method": {"PATCH", "/pay", "x"},
	} {
		if got := srv.do(t, req[0], req[1], "k", "acme", req[2]).StatusCode; got != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d, want 422", name, got)
		}
	}
	// GET passes through, key or not, and runs every time.
	before := srv.runs.Load()
	srv.do(t, "GET", "/pay", "k", "acme", "")
	srv.do(t, "GET", "/pay", "k", "acme", "")
	if got := srv.runs.Load() - before; got != 2 {
		t.Errorf("GET ran the handler %d times, want 2", got)
	}
}

func TestMiddleware_InProgressIs409(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	srv.block, srv.started = make(chan struct{}), make(chan struct{})
	req, err := http.NewRequest("POST", srv.URL+"/pay", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idempotency.Header, "k")
	done := make(chan int, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err != nil {
			done <- 0
			return
		}
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-srv.started
	if got := srv.do(t, "POST", "/pay", "k", "", "x").StatusCode; got != http.StatusConflict {
		t.Errorf("while in progress: %d, want 409", got)
	}
	close(srv.block)
	if got := <-done; got != http.StatusCreated {
		t.Fatalf("first request: %d, want 201", got)
	}
}

func TestMiddleware_PrincipalCannotReplayAnothersKey(t *testing.T) {
	t.Parallel()
	srv := newServer(t, idempotency.WithPrincipal(tenant))
	a := dump(t, srv.do(t, "POST", "/pay", "same-key", "tenant-a", "x"))
	b := dump(t, srv.do(t, "POST", "/pay", "same-key", "tenant-b", "x"))
	if bytes.Equal(a, b) || srv.runs.Load() != 2 {
		t.Fatalf("tenant-b got tenant-a's response (runs %d):\n%s", srv.runs.Load(), b)
	}
}

func TestMiddleware_5xxIsNotStored_4xxIs(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	srv.status.Store(http.StatusServiceUnavailable)
	if got := srv.do(t, "POST", "/pay", "k5", "", "x").StatusCode; got != http.StatusServiceUnavailable {
		t.Fatalf("first: %d, want the handler's 503", got)
	}
	srv.status.Store(http.StatusCreated)
	if got := srv.do(t, "POST", "/pay", "k5", "", "x").StatusCode; got != http.StatusCreated {
		t.Fatalf("retry after a 5xx: %d, want the handler run again (201)", got)
	}
	srv.status.Store(http.StatusPaymentRequired)
	srv.do(t, "POST", "/pay", "k4", "", "x")
	srv.status.Store(http.StatusCreated)
	if got := srv.do(t, "POST", "/pay", "k4", "", "x").StatusCode; got != http.StatusPaymentRequired {
		t.Fatalf("retry after a 4xx: %d, want the stored 402", got)
	}
	if n := srv.runs.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
}
