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
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/lockvalue"
	"github.com/lockgov/lockgov/internal/lockversion"
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
			Findings  []finding  `json:"findings"`
			ScannedAt *time.Time `json:"scanned_at"`
			Leader    bool       `json:"leader"`
			LeaderID  string     `json:"leader_id,omitempty"`
			Errors    []string   `json:"errors,omitempty"`
			// Detectors say when each detector last completed and why it
			// did not complete the last scan.
			Detectors []detectorStatus `json:"detectors,omitempty"`
			// Remediation says whether this agent deletes immortal locks
			// (it has a remediation token): the console shows its buttons.
			Remediation bool `json:"remediation"`
		}{nonNil(rec.Findings), timeOrNil(rec.ScannedAt), leader, rec.LeaderID, rec.Errors, rec.Detectors, a.cfg.RemediationToken != ""})
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
	return oneLeadingSlash(mux)
}

// oneLeadingSlash gives h a request path whose leading slashes are one.
// The agent prints its console's URL with a slash at the end
// ("http://127.0.0.1:9464/"); an operator who sets AGENT to it and runs a
// runbook's curl "$AGENT/api/v1/findings" sends "//api/v1/findings", which
// ServeMux answers with a redirect (307) that curl without -L, and every DELETE, do
// not follow: the command printed nothing. Only the leading run of
// literal slashes is collapsed, as the request wrote them (EscapedPath): a
// %2F is a byte of a segment, not a separator, so "/%2Fapi/v1/locks" stays
// a path that is not the API (404), as a proxy in front of the agent reads
// it too. The query is left as it is. ServeMux still cleans the rest as
// before (dot segments and inner runs of slashes get its 307, to a path on
// this host).
func oneLeadingSlash(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ep := r.URL.EscapedPath(); strings.HasPrefix(ep, "//") {
			// The n extra slashes that begin the escaped path begin Path
			// too, and RawPath when it is set (it then encodes Path), so
			// cutting them from both keeps the one an encoding of the other.
			n := len(ep) - len(strings.TrimLeft(ep, "/")) - 1
			u := *r.URL
			u.Path = u.Path[n:]
			if u.RawPath != "" {
				u.RawPath = u.RawPath[n:]
			}
			r2 := *r
			r2.URL = &u
			r = &r2
		}
		h.ServeHTTP(w, r)
	})
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
// (or key_base64=B: requestKey) with "Authorization: Bearer TOKEN", and
// optionally If-Match: "VERSION" (ifMatch). Only a lock with no TTL is
// deleted, only if its value is still the one read just before (another
// holder's lock is never deleted), and, with If-Match, only if that value
// is at VERSION: the lock the operator was shown, not one that replaced it
// since (412).
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
	want, err := ifMatch(r.Header, s)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.ScanTimeout)
	defer cancel()
	l, deleted, err := a.deleteImmortal(ctx, s, key, want)
	switch {
	case errors.Is(err, errNoLock):
		msg := err.Error()
		if strings.ContainsRune(key, utf8.RuneError) {
			msg += `: the key has U+FFFD, which the API's "key" has in place of bytes that are not UTF-8; send the key_base64 of the finding or lock instead`
		}
		writeJSON(w, http.StatusNotFound, apiError{msg})
	case errors.Is(err, errVersion):
		writeJSON(w, http.StatusPreconditionFailed, versionChanged(key, want, l))
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
		writeJSON(w, http.StatusConflict, apiError{"the lock changed since it was read (a new holder, or its etcd entry written again): not deleted"})
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

// ifMatch is the version a remediation request's If-Match names, "" when
// it has none (the delete then compares with the agent's own read only, as
// before there was a precondition). It must be one strong entity tag,
// "VERSION", with VERSION of the form of s's versions (lockversion):
// anything else is an error saying what is wrong, answered 400 rather than
// ignored, since the client asked for a check. "*" (any version, RFC 9110)
// is refused too: it is what a request without If-Match does, and a client
// sending it likely meant a version.
func ifMatch(h http.Header, s *store) (string, error) {
	const form = `send the version the lock or its finding was listed with, in double quotes: If-Match: "VERSION"`
	vals := h.Values("If-Match")
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return "", fmt.Errorf("%d If-Match headers: send one If-Match, with one version; %s", len(vals), form)
	}
	v := strings.TrimSpace(vals[0])
	switch {
	case v == "*":
		return "", fmt.Errorf("If-Match: * (any version) is what a DELETE without If-Match does; %s", form)
	case strings.HasPrefix(v, "W/"):
		return "", fmt.Errorf("If-Match %s is a weak entity tag, which never matches (RFC 9110 strong comparison); %s", v, form)
	case strings.Contains(v, ","):
		return "", fmt.Errorf("If-Match %s lists several versions: a lock is deleted at one version; %s", v, form)
	case len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"':
		return "", fmt.Errorf("If-Match %s is not a quoted version: %s", v, form)
	}
	v = v[1 : len(v)-1]
	switch {
	case v == "":
		return "", fmt.Errorf(`If-Match "" is empty: %s`, form)
	case s.etcd != nil && !lockversion.ValidEtcd(v):
		return "", fmt.Errorf(`If-Match "%s" is not the version of a lock on %s: an etcd lock's version is its holder entry's mod revision, a decimal number, as /api/v1/locks and the findings give it`, v, s.name)
	case s.etcd == nil && !lockversion.ValidRedis(v):
		return "", fmt.Errorf(`If-Match "%s" is not the version of a lock on %s: a Redis lock's version is the SHA-1 of its value, 40 hex digits (lowercase), as /api/v1/locks and the findings give it`, v, s.name)
	}
	return v, nil
}

// versionChangedJSON is the 412 answer: Current is the lock as the agent
// read it, when the request's read found it at another version.
type versionChangedJSON struct {
	Error   string `json:"error"`
	Current *Lock  `json:"current,omitempty"`
}

// versionChanged is the 412 answer to a DELETE of key with If-Match want,
// which found the lock l: at another version (the lock was replaced since
// the client listed it), or at want, in which case it changed between the
// agent's read and its delete.
func versionChanged(key, want string, l Lock) versionChangedJSON {
	if l.Version == want {
		return versionChangedJSON{Error: fmt.Sprintf(`the lock on %q changed after the agent read it at version "%s" (If-Match): not deleted; list it again and look before deleting`, key, want)}
	}
	ttl := "no TTL"
	if !l.Immortal() {
		ttl = "a TTL of " + l.TTL.String()
	}
	return versionChangedJSON{
		Error: fmt.Sprintf(`the lock on %q changed since it was listed: it is no longer at version "%s" (If-Match) but at "%s", held by %s, fence %d, with %s: not deleted; look at it again, and send its new version to delete it`,
			key, want, l.Version, holderText(l.Holder), l.Fence, ttl),
		Current: &l,
	}
}

// holderText says who holds a lock, for an answer (a Holder never carries
// the owner token).
func holderText(h lockvalue.Holder) string {
	if h.Foreign {
		return "a value lockgov did not write (another application's)"
	}
	s := h.Service
	if s == "" {
		s = "an unnamed service"
	}
	if h.Instance != "" {
		s += "/" + h.Instance
	}
	if h.Host != "" {
		s += " on " + h.Host
	}
	if h.PID != 0 {
		s += " pid " + strconv.Itoa(h.PID)
	}
	return s
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
	// errVersion is a lock that is not at the version of the request's
	// If-Match (412).
	errVersion = errors.New("the lock is not at the version of If-Match")
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

// deleteImmortal deletes the lock on key in s if it has no TTL, is
// unchanged between the read it makes and the delete, and, when want is
// not empty, is at version want (else errVersion, whether the read found
// another version or the delete found the value changed since the read).
// The Lock is the one read.
func (a *Agent) deleteImmortal(ctx context.Context, s *store, key, want string) (Lock, bool, error) {
	if s.etcd != nil {
		return a.deleteImmortalEtcd(ctx, s, key, want)
	}
	// One read: the lock, its version and the value the script compares
	// are of the same value.
	l, value, ok, err := a.lister.readRedis(ctx, s, key)
	if err != nil {
		return l, false, err
	}
	if !ok {
		return l, false, errNoLock
	}
	if want != "" && l.Version != want {
		return l, false, errVersion
	}
	if !l.Immortal() {
		return l, false, errNotImmortal
	}
	// The script deletes only the exact value read, whose version is want:
	// the precondition holds at the delete, atomically.
	n, err := remediateScript.Run(ctx, s.redis, []string{key}, value).Int()
	switch {
	case err != nil:
		return l, false, err
	case n == -1:
		return l, false, errGone
	case n == 2:
		return l, false, errNotImmortal // the same value, but a TTL now
	case n == 0 && want != "":
		return l, false, errVersion
	}
	return l, n == 1, nil
}

// deleteImmortalEtcd deletes the holder's entry of key (or, for an entry
// not written by etcdlock, the entry named key) if it has no lease, is
// unchanged since it was read, and, when want is not empty, is at version
// want (its mod revision).
func (a *Agent) deleteImmortalEtcd(ctx context.Context, s *store, key, want string) (Lock, bool, error) {
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
	// The lock as listed (its lease's TTL, for a 412's answer), except its
	// waiters: one entry was read.
	l, ok, err := a.lister.etcdLock(ctx, s, &etcdEntry{key: key, kv: kv.Value, lease: kv.Lease, rev: kv.CreateRevision, modRev: kv.ModRevision})
	if err != nil {
		return l, false, err
	}
	if !ok {
		return l, false, errNoLock // its lease expired since the read
	}
	if want != "" && l.Version != want {
		return l, false, errVersion
	}
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
	if !txn.Succeeded && want != "" {
		// Every write of the entry moves its mod revision: it is no
		// longer at want.
		return l, false, errVersion
	}
	return l, txn.Succeeded, nil
}
