package agent

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/etcdlock"
)

func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if reasons := a.notReady(); len(reasons) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.Join(reasons, "\n"))
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /api/v1/findings", func(w http.ResponseWriter, _ *http.Request) {
		rec, leader := a.served()
		writeJSON(w, http.StatusOK, struct {
			Findings  []detectors.Finding `json:"findings"`
			ScannedAt *time.Time          `json:"scanned_at"`
			Leader    bool                `json:"leader"`
			LeaderID  string              `json:"leader_id,omitempty"`
			Errors    []string            `json:"errors,omitempty"`
			// Remediation says whether this agent deletes immortal locks
			// (it has a remediation token): the console shows its buttons.
			Remediation bool `json:"remediation"`
		}{nonNil(rec.Findings), timeOrNil(rec.ScannedAt), leader, rec.LeaderID, rec.Errors, a.cfg.RemediationToken != ""})
	})
	mux.HandleFunc("GET /api/v1/locks", func(w http.ResponseWriter, _ *http.Request) {
		rec, leader := a.served()
		writeJSON(w, http.StatusOK, struct {
			Locks     []Lock     `json:"locks"`
			Truncated bool       `json:"truncated"`
			ScannedAt *time.Time `json:"scanned_at"`
			Leader    bool       `json:"leader"`
		}{nonNil(rec.Locks), rec.LocksTruncated, timeOrNil(rec.ScannedAt), leader})
	})
	mux.HandleFunc("GET /api/v1/instances", func(w http.ResponseWriter, _ *http.Request) {
		rec, leader := a.served()
		writeJSON(w, http.StatusOK, struct {
			Instances []Instance `json:"instances"`
			ScannedAt *time.Time `json:"scanned_at"`
			Leader    bool       `json:"leader"`
		}{nonNil(rec.Instances), timeOrNil(rec.ScannedAt), leader})
	})
	mux.HandleFunc("DELETE /api/v1/locks", a.remediate)
	consoleHandler(mux)
	return mux
}

// served returns the record this agent serves and whether it leads.
func (a *Agent) served() (record, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.rec, a.leading
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

type apiError struct {
	Error string `json:"error"`
}

//go:embed remediate.lua
var remediateSrc string

var remediateScript = redis.NewScript(remediateSrc)

// remediate deletes one immortal lock: DELETE /api/v1/locks?key=K[&store=S]
// (or key_base64=B: requestKey) with "Authorization: Bearer TOKEN". Only a
// lock with no TTL is deleted, and only if its value is still the one read
// just before (another holder's lock is never deleted).
func (a *Agent) remediate(w http.ResponseWriter, r *http.Request) {
	if a.cfg.RemediationToken == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lockgov"`)
		writeJSON(w, http.StatusUnauthorized, apiError{"remediation is off: start the agent with --remediation-token (or LOCKGOV_REMEDIATION_TOKEN)"})
		return
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.RemediationToken)) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lockgov"`)
		a.log.Warn("agent: remediation refused: no valid token", "remote", r.RemoteAddr)
		writeJSON(w, http.StatusUnauthorized, apiError{"remediation needs the agent's remediation token as a bearer token"})
		return
	}
	key, err := requestKey(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	s, err := a.storeNamed(r.URL.Query().Get("store"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.ScanTimeout)
	defer cancel()
	l, deleted, err := a.deleteImmortal(ctx, s, key)
	switch {
	case errors.Is(err, errNoLock):
		msg := err.Error()
		if strings.ContainsRune(key, utf8.RuneError) {
			msg += `: the key has U+FFFD, which the API's "key" has in place of bytes that are not UTF-8; send the key_base64 of the finding or lock instead`
		}
		writeJSON(w, http.StatusNotFound, apiError{msg})
	case errors.Is(err, errNotImmortal):
		writeJSON(w, http.StatusConflict, apiError{err.Error()})
	case errors.Is(err, errGone):
		// Possibly this request's own deletion (a resent script): logged
		// as the audit line of a deletion that may have happened.
		a.log.Warn("agent: remediation: the immortal lock is gone, deleted by this request or released by its holder meanwhile",
			append(keyAttrs(s.name, key), "key_pattern", l.Pattern,
				"holder_service", l.Holder.Service, "holder_instance", l.Holder.Instance, "fence", l.Fence, "remote", r.RemoteAddr)...)
		writeJSON(w, http.StatusGone, apiError{err.Error()})
	case err != nil:
		writeJSON(w, http.StatusBadGateway, apiError{err.Error()})
	case !deleted:
		writeJSON(w, http.StatusConflict, apiError{"the lock changed since it was read (a new holder or a TTL): not deleted"})
	default:
		a.log.Warn("agent: remediation: deleted an immortal lock",
			append(keyAttrs(s.name, key), "key_pattern", l.Pattern,
				"holder_service", l.Holder.Service, "holder_instance", l.Holder.Instance, "fence", l.Fence, "remote", r.RemoteAddr)...)
		writeJSON(w, http.StatusOK, struct {
			Deleted Lock `json:"deleted"`
		}{l})
	}
}

// requestKey is the key a remediation request names: key=KEY, or
// key_base64=B, the standard base64 (RFC 4648, padded) of the key's bytes as
// the API writes it for a key that is not valid UTF-8, or both if they name
// the same key. (key=, percent-encoded, can carry any bytes too; key_base64
// is what a client has that read the key from JSON.)
func requestKey(q url.Values) (string, error) {
	key, b64 := q.Get("key"), q.Get("key_base64")
	if b64 != "" {
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			msg := fmt.Sprintf("key_base64 is not standard base64 (RFC 4648, with padding, as the API writes it): %v", err)
			if strings.Contains(b64, " ") {
				msg += `; a "+" in a query string reads as a space: send it as %2B`
			}
			return "", errors.New(msg)
		}
		if key != "" && key != string(raw) {
			return "", fmt.Errorf("key %q and key_base64 (%q) name different keys: send one of them", key, raw)
		}
		key = string(raw)
	}
	if key == "" {
		return "", errors.New("key is required: DELETE /api/v1/locks?key=KEY[&store=STORE], or key_base64=BASE64 (the key_base64 of the finding or lock) for a key that is not UTF-8")
	}
	return key, nil
}

// keyAttrs are the log attributes naming store and key. A key that is not
// valid UTF-8 is also logged as key_base64: a JSON log handler writes U+FFFD
// for its bad bytes (slog's text handler quotes them), and the audit line
// of a deletion must name the key that was deleted.
func keyAttrs(storeName, key string) []any {
	attrs := []any{"store", storeName, "key", key}
	if !utf8.ValidString(key) {
		attrs = append(attrs, "key_base64", base64.StdEncoding.EncodeToString([]byte(key)))
	}
	return attrs
}

var (
	errNoLock      = errors.New("no such lock")
	errNotImmortal = errors.New("the lock has a TTL: it expires by itself, and remediation deletes only locks without one")
	errGone        = errors.New("the lock is gone: this request deleted it (its reply was lost and the command resent) or its holder released it meanwhile")
)

func (a *Agent) storeNamed(name string) (*store, error) {
	if name == "" {
		if len(a.stores) == 1 {
			return a.stores[0], nil
		}
		return nil, errors.New("store is required: the agent watches several stores")
	}
	for _, s := range a.stores {
		if s.name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no store %q", name)
}

func (a *Agent) deleteImmortal(ctx context.Context, s *store, key string) (Lock, bool, error) {
	if s.etcd != nil {
		return a.deleteImmortalEtcd(ctx, s, key)
	}
	raw, err := s.redis.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return Lock{}, false, errNoLock
	}
	if err != nil {
		return Lock{}, false, err
	}
	l, ok, err := a.lister.show(ctx, s, key)
	if err != nil {
		return l, false, err
	}
	if !ok {
		return l, false, errNoLock
	}
	if !l.Immortal() {
		return l, false, errNotImmortal
	}
	n, err := remediateScript.Run(ctx, s.redis, []string{key}, raw).Int()
	if err == nil && n == -1 {
		return l, false, errGone
	}
	return l, n == 1, err
}

// deleteImmortalEtcd deletes the holder's entry of key (or, for an entry
// not written by etcdlock, the entry named key) if it has no lease and is
// unchanged since it was read.
func (a *Agent) deleteImmortalEtcd(ctx context.Context, s *store, key string) (Lock, bool, error) {
	pfx := etcdlock.DefaultPrefix + key + "\x00"
	resp, err := s.etcd.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return Lock{}, false, err
	}
	if len(resp.Kvs) == 0 {
		// An entry another writer put under the prefix (not etcdlock's
		// "key NUL lease" layout) is a lock of its own to the detectors,
		// named by its whole etcd key: that is the key their immortal
		// finding, and the console's button, sends.
		if !isForeignEntryKey(key) {
			return Lock{}, false, errNoLock
		}
		if resp, err = s.etcd.Get(ctx, key); err != nil {
			return Lock{}, false, err
		}
		if len(resp.Kvs) == 0 {
			return Lock{}, false, errNoLock
		}
	}
	kv := resp.Kvs[0]
	l := Lock{Store: s.name, Key: key, Holder: etcdlock.DecodeValue(kv.Value), Fence: uint64(kv.CreateRevision), TTL: NoTTL}
	a.lister.finish(&l, time.Now())
	if kv.Lease != 0 {
		return l, false, errNotImmortal
	}
	// Else counts the entry in the same transaction: gone is told from
	// changed as on Redis (410: released meanwhile, not a new holder).
	k := string(kv.Key)
	txn, err := s.etcd.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision),
		clientv3.Compare(clientv3.Value(k), "=", string(kv.Value)),
		clientv3.Compare(clientv3.LeaseValue(k), "=", clientv3.NoLease),
	).Then(clientv3.OpDelete(k)).Else(clientv3.OpGet(k, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return l, false, err
	}
	if !txn.Succeeded && len(txn.Responses) == 1 && txn.Responses[0].GetResponseRange().GetCount() == 0 {
		return l, false, errGone
	}
	return l, txn.Succeeded, nil
}
