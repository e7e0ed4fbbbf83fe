package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
)

// Keys another application wrote under a scanned pattern need not be UTF-8.
// encoding/json writes U+FFFD for each byte that is not: lossy is what the
// API's "key" says for raw, and a different key a live lock may hold.
const (
	rawKey   = "lock:\xff\xfe"
	lossyKey = "lock:\uFFFD\uFFFD"
)

// keyed is how a client reads a key from the API: key_base64, when there,
// is the exact key.
type keyed struct {
	Kind       string `json:"kind"`
	Key        string `json:"key"`
	KeyBase64  []byte `json:"key_base64"`
	KeyPattern string `json:"key_pattern"`
	Immortal   bool   `json:"immortal"`
}

func (k keyed) exact() string {
	if k.KeyBase64 != nil {
		return string(k.KeyBase64)
	}
	return k.Key
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// holdLiveLock acquires key through a redislock Locker on c, with a
// minute's TTL: a live lock, which remediation must leave alone. It is
// released, and the Locker closed, when the test ends.
func holdLiveLock(t *testing.T, ctx context.Context, c *redis.Client, key string) instrument.Lease {
	t.Helper()
	l, err := redislock.New(c, redislock.WithService("billing"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	live, err := l.Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Release(context.Background()) })
	return live
}

// immortalFindings waits for n immortal findings and returns them.
func immortalFindings(t *testing.T, a *Agent, n int) []keyed {
	t.Helper()
	var got []keyed
	waitFor(t, fmt.Sprintf("%d immortal findings", n), func() bool {
		_, body := get(t, a.URL()+"api/v1/findings")
		var doc struct{ Findings []keyed }
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatalf("findings: %v in %s", err, body)
		}
		got = got[:0]
		for _, f := range doc.Findings {
			if f.Kind == detectors.KindImmortal {
				got = append(got, f)
			}
		}
		return len(got) == n
	})
	return got
}

// TestRemediation_AKeyThatIsNotUTF8IsDeletedByTheKeyTheAPIGaveForIt: an
// immortal lock on a key that is not UTF-8 is named losslessly by the
// findings and the locks (key_base64), deleted by DELETE
// /api/v1/locks?key_base64=, and logged so that even a JSON log names it;
// the live lock on the key its lossy "key" reads as is never touched.
// Before, the API said only "lock:\uFFFD\uFFFD": a client acting on it
// named that other lock (409, it has a TTL), and the immortal one could not
// be deleted.
func TestRemediation_AKeyThatIsNotUTF8IsDeletedByTheKeyTheAPIGaveForIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, c := redisWithImmortalLock(t, ctx, rawKey, "another app's lock")
	live := holdLiveLock(t, ctx, c, lossyKey)

	logs := &syncBuf{}
	cfg := remediationConfig("agent", r, "t0k")
	// A JSON log handler writes U+FFFD for bytes that are not UTF-8 (the
	// text handler quotes them): the log line must still name the key.
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	a := start(t, cfg)

	fs := immortalFindings(t, a, 1)
	if f := fs[0]; f.exact() != rawKey || f.Key != lossyKey || f.KeyPattern != policy.OtherLabel {
		t.Fatalf("the immortal finding names %q (key %q, key_base64 %q, pattern %q), want %q, key %q, pattern %q",
			f.exact(), f.Key, f.KeyBase64, f.KeyPattern, rawKey, lossyKey, policy.OtherLabel)
	}
	var locks []keyed
	waitFor(t, "both locks listed", func() bool {
		_, body := get(t, a.URL()+"api/v1/locks")
		var doc struct{ Locks []keyed }
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatalf("locks: %v in %s", err, body)
		}
		locks = doc.Locks
		return len(locks) == 2
	})
	for _, l := range locks {
		switch {
		case l.exact() == rawKey && l.Immortal:
		case l.exact() == lossyKey && !l.Immortal && l.KeyBase64 == nil: // UTF-8: key alone, as before
		default:
			t.Errorf("lock %+v: want %q immortal and %q with a TTL and no key_base64", l, rawKey, lossyKey)
		}
	}

	code, body := del(t, a, "key_base64="+url.QueryEscape(b64(rawKey)), "t0k")
	var deleted struct{ Deleted keyed }
	if err := json.Unmarshal([]byte(body), &deleted); code != http.StatusOK || err != nil || deleted.Deleted.exact() != rawKey {
		t.Fatalf("DELETE ?key_base64=%s: %d %s, want 200 naming %q", b64(rawKey), code, body, rawKey)
	}
	if n, _ := c.Exists(ctx, rawKey).Result(); n != 0 {
		t.Error("the immortal lock is still there")
	}
	if err := live.Refresh(ctx); err != nil {
		t.Errorf("the live lock on %q: %v", lossyKey, err)
	}
	// A key with U+FFFD that names no lock: the answer says what to send.
	if code, body := del(t, a, "key="+url.QueryEscape(rawKey[:5]+"\uFFFD"), "t0k"); code != http.StatusNotFound || !strings.Contains(body, "key_base64") {
		t.Errorf("no lock on a key with U+FFFD: %d %s, want 404 pointing at key_base64", code, body)
	}

	out := logs.String()
	if !utf8.ValidString(out) || !strings.Contains(out, `"key_base64":"`+b64(rawKey)+`"`) {
		t.Errorf("the deletion's log line does not name %q losslessly:\n%s", rawKey, out)
	}
	for _, p := range []string{"api/v1/findings", "api/v1/locks", "api/v1/instances", "metrics"} {
		if _, body := get(t, a.URL()+p); !utf8.ValidString(body) || strings.Contains(body, rawKey) {
			t.Errorf("/%s is not UTF-8 or carries the raw key:\n%.500q", p, body)
		}
	}
}

// TestRemediation_ABadOrContradictoryKeyBase64Is400NamingTheProblem: a
// key_base64 that is not standard base64, or that names another key than
// key given alongside, is refused before any store is read, saying which.
// Both naming the same key is one key.
func TestRemediation_ABadOrContradictoryKeyBase64Is400NamingTheProblem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, c := redisWithImmortalLock(t, ctx, rawKey, "another app's lock")
	a := start(t, remediationConfig("agent", r, "t0k"))
	for _, tc := range []struct {
		name, query string
		code        int
		body        string
	}{
		{"not base64", "key_base64=lock:%FF", 400, "key_base64 is not standard base64"},
		// "+" unescaped in a query string reads as a space.
		{"a plus sent as a space", "key_base64=" + b64("lock:\x80\xf8"), 400, "%2B"},
		{"empty", "key_base64=", 400, "key is required"},
		{"contradicting key", "key=lock:other&key_base64=" + url.QueryEscape(b64(rawKey)), 400, "name different keys"},
		{"the lossy key with its exact one", "key=" + url.QueryEscape(lossyKey) + "&key_base64=" + url.QueryEscape(b64(rawKey)), 400, "name different keys"},
		{"agreeing key", "key=" + url.QueryEscape(rawKey) + "&key_base64=" + url.QueryEscape(b64(rawKey)), 200, `"key_base64":"` + b64(rawKey) + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := del(t, a, tc.query, "t0k"); code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("DELETE ?%s: %d %s, want %d saying %q", tc.query, code, body, tc.code, tc.body)
			}
		})
	}
	if n, _ := c.Exists(ctx, rawKey).Result(); n != 0 {
		t.Error("the immortal lock is still there after the agreeing request")
	}
}

// TestRemediation_Etcd_KeysThatAreNotUTF8AreDeletedByTheirKeyBase64: on
// etcd, an entry another writer put under the lock prefix (named by its
// whole etcd key) and an etcdlock entry whose lock key is not UTF-8, both
// without a lease, are named exactly by their findings and deleted by
// key_base64.
func TestRemediation_Etcd_KeysThatAreNotUTF8AreDeletedByTheirKeyBase64(t *testing.T) {
	e := testenv.NewEtcd(t)
	ec := testenv.NewEtcdClient(t, e.Endpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	foreign := etcdlock.DefaultPrefix + "orders/\xff"
	entry := etcdlock.DefaultPrefix + rawKey + "\x00" + "00000000000000ff"
	for _, k := range []string{foreign, entry} {
		if _, err := ec.Put(ctx, k, `{"owner":"another library"}`); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig("agent")
	cfg.Etcd = e.Endpoints()
	cfg.RemediationToken = "t0k"
	a := start(t, cfg)
	want := map[string]bool{foreign: true, rawKey: true}
	for _, f := range immortalFindings(t, a, 2) {
		if !want[f.exact()] {
			t.Fatalf("an immortal finding names %q (key %q, key_base64 %q), want one of %q", f.exact(), f.Key, f.KeyBase64, []string{foreign, rawKey})
		}
		if code, body := del(t, a, "key_base64="+url.QueryEscape(b64(f.exact())), "t0k"); code != http.StatusOK {
			t.Errorf("DELETE %q: %d %s, want 200", f.exact(), code, body)
		}
	}
	for _, k := range []string{foreign, entry} {
		if resp, err := ec.Get(ctx, k); err != nil || len(resp.Kvs) != 0 {
			t.Errorf("%q is still there (%v)", k, err)
		}
	}
}

// TestRecord_AKeyThatIsNotUTF8SurvivesTheLeadersRecord: followers serve the
// record the leader published as JSON; the keys in it come back exact, and
// so does a stale finding's staleness.
func TestRecord_AKeyThatIsNotUTF8SurvivesTheLeadersRecord(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := record{
		Findings: []finding{{Finding: detectors.Finding{Detector: "locks", Kind: detectors.KindImmortal, Key: rawKey}},
			{Finding: detectors.Finding{Detector: "locks", Kind: detectors.KindImmortal, Key: "lock:b"}, Stale: true, DetectedAt: at}},
		Locks: []Lock{{Store: "s", Key: rawKey, TTL: NoTTL}},
	}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back record
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Findings) != 2 || back.Findings[0].Key != rawKey || back.Findings[0].Stale || len(back.Locks) != 1 || back.Locks[0].Key != rawKey {
		t.Fatalf("record %s read back as %+v", data, back)
	}
	if f := back.Findings[1]; f.Key != "lock:b" || !f.Stale || !f.DetectedAt.Equal(at) {
		t.Fatalf("stale finding read back as %+v from %s", f, data)
	}
}
