package idempotency

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
)

// refKey is the Idempotency-Key grammar, written out separately from
// parseKey: a token or an sf-string of 1..255 visible ASCII characters
// other than '"'.
func refKey(v string) (string, bool) {
	if len(v) >= 2 && strings.HasPrefix(v, `"`) && strings.HasSuffix(v, `"`) {
		v = v[1 : len(v)-1]
	}
	if len(v) < 1 || len(v) > MaxHeaderKeyBytes {
		return "", false
	}
	for _, c := range []byte(v) {
		if c <= ' ' || c >= 0x7f || c == '"' {
			return "", false
		}
	}
	return v, true
}

// FuzzParseKey holds that parseKey agrees with the grammar, that the token
// and sf-string forms of a key are one key, and that two header values are
// always refused.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"k1", `"k1"`, `""`, `"`, `"a"b"`, "a b", "\x7f", strings.Repeat("x", 255), strings.Repeat("x", 256), `"` + strings.Repeat("x", 255) + `"`, "é", "a\"", "\"a"} {
		f.Add(s, "")
	}
	f.Add("k1", "k1")
	f.Fuzz(func(t *testing.T, v, second string) {
		key, ok := parseKey([]string{v})
		want, wantOK := refKey(v)
		if ok != wantOK || key != want {
			t.Fatalf("parseKey(%q) = %q, %v; the grammar says %q, %v", v, key, ok, want, wantOK)
		}
		if ok {
			if q, qok := parseKey([]string{`"` + key + `"`}); !qok || q != key {
				t.Fatalf("key %q and its sf-string form %q are not one key (%q, %v)", key, `"`+key+`"`, q, qok)
			}
		}
		if _, ok := parseKey([]string{v, second}); ok {
			t.Fatalf("two Idempotency-Key values %q, %q accepted", v, second)
		}
	})
}

// FuzzFingerprint holds that two different requests never share a
// fingerprint and two different (principal, key) pairs never share a
// Store key: the encodings are unambiguous.
func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "/a", []byte("b"), "POST", "/a\nb", []byte(""), "p", "k", "p:k", "")
	f.Add("POST", "/orders?x=1", []byte("{}"), "PATCH", "/orders?x=1", []byte("{}"), "1:a", "b", "1", "a:b")
	f.Add("POST", "/", []byte(nil), "POST", "/", []byte(""), "", "k", "", "k")
	f.Fuzz(func(t *testing.T, m1, u1 string, b1 []byte, m2, u2 string, b2 []byte, p1, k1, p2, k2 string) {
		// Methods are HTTP tokens; request URIs as net/http forms them.
		if !isToken(m1) || !isToken(m2) {
			return
		}
		u1, u2 = requestURI(u1), requestURI(u2)
		same := m1 == m2 && u1 == u2 && bytes.Equal(b1, b2)
		if eq := bytes.Equal(fingerprint(m1, u1, b1), fingerprint(m2, u2, b2)); eq != same {
			t.Fatalf("fingerprints equal = %v for (%q %q %q) and (%q %q %q)", eq, m1, u1, b1, m2, u2, b2)
		}
		if eq := scopeKey(p1, k1) == scopeKey(p2, k2); eq != (p1 == p2 && k1 == k2) {
			t.Fatalf("Store keys equal = %v for (%q, %q) and (%q, %q)", eq, p1, k1, p2, k2)
		}
	})
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func requestURI(s string) string {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.URL.Path = "/" + s
	return r.URL.RequestURI()
}

// FuzzMiddlewareKey drives the middleware on a real Redis with any
// Idempotency-Key value and body: a malformed key is answered 400 without
// running the handler or writing to Redis; a well-formed one runs the
// handler once, a retry replays the same status, headers and body without
// running it, and the same key with another body is answered 422.
func FuzzMiddlewareKey(f *testing.F) {
	for _, s := range []string{"k1", `"k1"`, `""`, "a b", "\x00", strings.Repeat("x", 256), "é", `"a"b"`} {
		f.Add(s, []byte(`{"amount":1}`))
	}
	r := testenv.NewRedis(f)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	f.Cleanup(func() { _ = c.Close() })
	s, err := New(c)
	if err != nil {
		f.Fatal(err)
	}
	var runs, input atomic.Int64
	h := Middleware(s, WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-Input") }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Run", strconv.FormatInt(n, 10))
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "run %d: %q", n, body)
		}))
	f.Fuzz(func(t *testing.T, key string, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Each input is its own principal: keys never meet across inputs.
		principal := strconv.FormatInt(input.Add(1), 10)
		send := func(b []byte) *httptest.ResponseRecorder {
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", bytes.NewReader(b))
			req.Header[Header] = []string{key}
			req.Header.Set("X-Input", principal)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w
		}
		keysBefore, err := c.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		before := runs.Load()
		first := send(body)
		if _, ok := refKey(key); !ok {
			keysAfter, err := c.DBSize(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if first.Code != http.StatusBadRequest || runs.Load() != before || keysAfter != keysBefore ||
				!strings.Contains(first.Body.String(), "Idempotency-Key") {
				t.Fatalf("malformed key %q: status %d %q, handler runs %d, keys %d -> %d; want 400 naming the header, no run, nothing written",
					key, first.Code, first.Body.String(), runs.Load()-before, keysBefore, keysAfter)
			}
			return
		}
		if first.Code != http.StatusCreated || runs.Load() != before+1 {
			t.Fatalf("key %q: first request: status %d, handler runs %d; want 201, 1", key, first.Code, runs.Load()-before)
		}
		retry := send(body)
		if retry.Code != first.Code || retry.Body.String() != first.Body.String() ||
			retry.Header().Get("X-Run") != first.Header().Get("X-Run") || runs.Load() != before+1 {
			t.Fatalf("key %q: retry got %d %q (X-Run %s), first %d %q (X-Run %s); handler runs %d",
				key, retry.Code, retry.Body.String(), retry.Header().Get("X-Run"), first.Code, first.Body.String(), first.Header().Get("X-Run"), runs.Load()-before)
		}
		if other := send(append(body, 'x')); other.Code != http.StatusUnprocessableEntity || runs.Load() != before+1 {
			t.Fatalf("key %q reused with another body: status %d, handler runs %d; want 422, none", key, other.Code, runs.Load()-before-1)
		}
	})
}
