package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Header is the request header that carries the idempotency key.
const Header = "Idempotency-Key"

// Limits of the middleware.
const (
	// MaxHeaderKeyBytes bounds an Idempotency-Key value (Stripe's limit).
	MaxHeaderKeyBytes = 255
	// DefaultMaxRequestBytes bounds the request body read to fingerprint it.
	DefaultMaxRequestBytes = 1 << 20
)

// MiddlewareOption configures Middleware.
type MiddlewareOption interface {
	applyMiddleware(*mwConfig)
}

type mwConfig struct {
	require   bool
	principal func(*http.Request) string
	methods   map[string]bool
}

type mwOptionFunc func(*mwConfig)

func (f mwOptionFunc) applyMiddleware(c *mwConfig) { f(c) }

// RequireKey answers 400 to a request of a covered method without an
// Idempotency-Key header. Without it such a request passes through.
func RequireKey() MiddlewareOption {
	return mwOptionFunc(func(c *mwConfig) { c.require = true })
}

// WithPrincipal scopes keys by f(r) (the authenticated tenant or user), so
// one principal can never replay another's stored response. Without it all
// requests share one key space.
func WithPrincipal(f func(*http.Request) string) MiddlewareOption {
	return mwOptionFunc(func(c *mwConfig) { c.principal = f })
}

// WithMethods sets the methods the middleware covers (POST and PATCH by
// default); others pass through untouched.
func WithMethods(methods ...string) MiddlewareOption {
	return mwOptionFunc(func(c *mwConfig) {
		c.methods = map[string]bool{}
		for _, m := range methods {
			c.methods[m] = true
		}
	})
}

// stored is a response as kept in the Store.
type stored struct {
	Status int         `json:"s"`
	Header http.Header `json:"h"`
	Body   []byte      `json:"b"`
}

// errServerError releases the key of a request whose handler answered 5xx,
// so that the client may retry it.
var errServerError = errors.New("idempotency: handler answered 5xx")

// Middleware makes POST and PATCH handlers idempotent by the
// Idempotency-Key header: the first request with a key runs the handler;
// a retry gets the first response's status, headers and body byte for byte
// while the key's record lives. It answers 409 while the first request
// with the key is in progress, 422 when the key is reused with another
// method, path or body, 400 when the key is malformed (or missing, with
// RequireKey, or too long together with the principal), and 503 with Retry-After when the Store fails (fail
// closed) or, with WithReplicaAcks, too few replicas have the record. A 5xx response is not stored, so a retry runs the handler
// again; 4xx responses are stored.
func Middleware(s *Store, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	cfg := mwConfig{methods: map[string]bool{http.MethodPost: true, http.MethodPatch: true}}
	for _, o := range opts {
		if o != nil {
			o.applyMiddleware(&cfg)
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !cfg.methods[r.Method] {
				next.ServeHTTP(w, r)
				return
			}
			vals := r.Header.Values(Header)
			if len(vals) == 0 {
				if cfg.require {
					http.Error(w, "Idempotency-Key header required", http.StatusBadRequest)
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			key, ok := parseKey(vals)
			if !ok {
				http.Error(w, "malformed Idempotency-Key header", http.StatusBadRequest)
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, DefaultMaxRequestBytes))
			if err != nil {
				http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			principal := ""
			if cfg.principal != nil {
				principal = cfg.principal(r)
			}
			var failed *stored
			res, err := s.Do(r.Context(), scopeKey(principal, key), fingerprint(r.Method, r.URL.RequestURI(), body), func(ctx context.Context, _ Attempt) ([]byte, error) {
				rec := &recorder{header: http.Header{}, status: http.StatusOK}
				next.ServeHTTP(rec, r.WithContext(ctx))
				// The first response's Date is part of what a replay repeats.
				if rec.header.Get("Date") == "" {
					rec.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
				}
				resp := stored{Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}
				if resp.Status >= 500 {
					failed = &resp
					return nil, errServerError
				}
				return json.Marshal(resp)
			}, NoWait())
			switch {
			case errors.Is(err, errServerError):
				write(w, *failed)
			case errors.Is(err, ErrInProgress):
				w.Header().Set("Retry-After", "1")
				http.Error(w, "a request with this Idempotency-Key is in progress", http.StatusConflict)
			case errors.Is(err, ErrFingerprintMismatch):
				http.Error(w, "Idempotency-Key reused with another request", http.StatusUnprocessableEntity)
			case errors.Is(err, ErrInvalid):
				// The scoped key (principal and Idempotency-Key) is over
				// MaxKeyBytes: no retry of this request can succeed, so
				// it is not a 503 with Retry-After.
				http.Error(w, fmt.Sprintf("Idempotency-Key too long for this principal (the two together over %d bytes)", MaxKeyBytes), http.StatusBadRequest)
			case errors.Is(err, ErrResultTooLarge):
				http.Error(w, "response too large to store for Idempotency-Key", http.StatusInternalServerError)
			case errors.Is(err, ErrNotReplicated):
				// The handler ran (or ran before) and its response is on the
				// primary only: a retry replays it once the replicas have it.
				w.Header().Set("Retry-After", "1")
				http.Error(w, "response not yet replicated: retry with the same Idempotency-Key", http.StatusServiceUnavailable)
			case err != nil:
				w.Header().Set("Retry-After", "1")
				http.Error(w, "idempotency store unavailable", http.StatusServiceUnavailable)
			default:
				var resp stored
				if err := json.Unmarshal(res.Body, &resp); err != nil {
					http.Error(w, "stored response unreadable", http.StatusInternalServerError)
					return
				}
				write(w, resp)
			}
		})
	}
}

// parseKey accepts one header value: a token or an sf-string ("..."), of
// 1..MaxHeaderKeyBytes visible ASCII characters.
func parseKey(vals []string) (string, bool) {
	if len(vals) != 1 {
		return "", false
	}
	k := vals[0]
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	if k == "" || len(k) > MaxHeaderKeyBytes {
		return "", false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e || k[i] == '"' {
			return "", false
		}
	}
	return k, true
}

// scopeKey is the Store key of an Idempotency-Key for a principal.
// Length-prefixed, so no principal/key pair collides with another.
func scopeKey(principal, key string) string {
	return strconv.Itoa(len(principal)) + ":" + principal + ":" + key
}

// fingerprint identifies a request by method, URI and body: a key reused
// with any of them changed is refused. The method (an HTTP token) and the
// request URI (escaped) hold no newline, so the encoding is unambiguous.
func fingerprint(method, requestURI string, body []byte) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", method, requestURI)
	h.Write(body)
	return h.Sum(nil)
}

func write(w http.ResponseWriter, resp stored) {
	for k, v := range resp.Header {
		w.Header()[k] = append([]string(nil), v...)
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// recorder keeps a handler's response instead of sending it.
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

// WriteHeader keeps the first final status. An informational one (1xx but
// 101, as net/http counts them: 103 Early Hints) is not the response: it
// is dropped, since nothing reaches the client before fn returns. Kept as
// the status, a 103 before a 201 was answered and replayed as 200, and a
// 103 before a 500 was stored as a success instead of released.
func (r *recorder) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		return
	}
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}
