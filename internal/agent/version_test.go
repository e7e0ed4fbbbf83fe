package agent

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// versioned is a lock or finding as a client reads it, with its version.
type versioned struct {
	Kind     string `json:"kind"`
	Key      string `json:"key"`
	Immortal bool   `json:"immortal"`
	Version  string `json:"version"`
}

// listedVersions returns the version /api/v1/locks gives the lock on key and
// the one its immortal finding gives, once both are listed and cond holds
// of the lock's.
func listedVersions(t *testing.T, a *Agent, key string, cond func(lock, finding string) bool) (lock, finding string) {
	t.Helper()
	waitFor(t, "the immortal lock "+key+" listed with its finding", func() bool {
		_, body := get(t, a.URL()+"api/v1/locks")
		var locks struct{ Locks []versioned }
		if err := json.Unmarshal([]byte(body), &locks); err != nil {
			t.Fatalf("locks: %v in %s", err, body)
		}
		_, body = get(t, a.URL()+"api/v1/findings")
		var fs struct{ Findings []versioned }
		if err := json.Unmarshal([]byte(body), &fs); err != nil {
			t.Fatalf("findings: %v in %s", err, body)
		}
		var gotLock, gotFinding bool
		for _, l := range locks.Locks {
			if l.Key == key && l.Immortal {
				lock, gotLock = l.Version, true
			}
		}
		for _, f := range fs.Findings {
			if f.Key == key && f.Kind == detectors.KindImmortal {
				finding, gotFinding = f.Version, true
			}
		}
		return gotLock && gotFinding && cond(lock, finding)
	})
	return lock, finding
}

func quoted(v string) string { return `"` + v + `"` }

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestRemediation_IfMatch_ALockReplacedSinceItWasListedIsKept: another
// application replaces an immortal lock with another immortal one between
// the operator's look (the version the lock and its finding were listed
// with) and the DELETE. With that version as If-Match the DELETE is 412,
// naming the new holder and its version, and the new lock is kept; with
// the new lock's version it is deleted. A Redis lock's version is the SHA-1
// of its value (what redis.sha1hex gives in a script), an etcd lock's the
// mod revision of its holder entry. Before, the API took no precondition:
// the new lock was deleted.
func TestRemediation_IfMatch_ALockReplacedSinceItWasListedIsKept(t *testing.T) {
	const key = "lock:order:7"
	for _, backend := range []string{"redis", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := testConfig("agent")
			cfg.RemediationToken = "t0k"
			// put writes the lock without a TTL and returns its expected
			// version; left says whether a lock with value is there.
			var put func(value string) string
			var left func(value string) bool
			oldValue, newValue := `{"service":"billing","pid":1}`, `{"service":"payments","pid":2}`
			if backend == "redis" {
				r := testenv.NewRedis(t)
				c := r.Client(t)
				cfg.Redis = []string{"redis://" + r.Addr()}
				oldValue, newValue = "tok-old 3 "+oldValue, "tok-new 4 "+newValue
				put = func(value string) string {
					if err := c.Set(ctx, key, value, 0).Err(); err != nil {
						t.Fatal(err)
					}
					return sha1hex(value)
				}
				left = func(value string) bool { v, err := c.Get(ctx, key).Result(); return err == nil && v == value }
			} else {
				e := testenv.NewEtcd(t)
				ec := testenv.NewEtcdClient(t, e.Endpoints()...)
				cfg.Etcd = e.Endpoints()
				entry := etcdlock.DefaultPrefix + key + "\x00" + "00000000000000ff"
				put = func(value string) string {
					resp, err := ec.Put(ctx, entry, value)
					if err != nil {
						t.Fatal(err)
					}
					return strconv.FormatInt(resp.Header.Revision, 10)
				}
				left = func(value string) bool {
					resp, err := ec.Get(ctx, entry)
					return err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == value
				}
			}
			wantOld := put(oldValue)
			a := start(t, cfg)
			old, oldFinding := listedVersions(t, a, key, func(string, string) bool { return true })

			wantNew := put(newValue) // replaced by another immortal lock
			code, body := delIfMatch(t, a, "key="+key, "t0k", quoted(old))
			if code != http.StatusPreconditionFailed || !left(newValue) {
				t.Fatalf("DELETE with If-Match of the version listed before the lock was replaced: %d %s; the new lock kept: %v; want 412 and kept", code, body, left(newValue))
			}
			var failed struct {
				Error   string
				Current *versioned
			}
			if err := json.Unmarshal([]byte(body), &failed); err != nil || !strings.Contains(failed.Error, "payments") ||
				!strings.Contains(failed.Error, wantNew) || failed.Current == nil || failed.Current.Version != wantNew {
				t.Errorf("412 body %s: want an error naming the new holder (payments) and version %s, and the current lock", body, wantNew)
			}
			if old != wantOld || oldFinding != wantOld {
				t.Errorf("the lock was listed with version %q and its finding with %q, want %q", old, oldFinding, wantOld)
			}
			if strings.Contains(old, "tok-") || strings.Contains(body, "tok-") {
				t.Errorf("a version or answer carries the owner token: %q, %s", old, body)
			}

			cur, _ := listedVersions(t, a, key, func(l, f string) bool { return l != old && f != old })
			if cur != wantNew {
				t.Errorf("the new lock is listed with version %q, want %q", cur, wantNew)
			}
			if code, body := delIfMatch(t, a, "key="+key, "t0k", quoted(cur)); code != http.StatusOK || left(newValue) {
				t.Fatalf("DELETE with If-Match of the current version: %d %s, want 200 and the lock gone", code, body)
			}
		})
	}
}

// TestRemediation_IfMatch_AMalformedPreconditionIs400NamingTheProblem: an
// If-Match that is not one quoted, strong version of the store's form is
// refused before anything is deleted, saying what is wrong.
func TestRemediation_IfMatch_AMalformedPreconditionIs400NamingTheProblem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := testenv.NewRedis(t)
	c := r.Client(t)
	e := testenv.NewEtcd(t)
	ec := testenv.NewEtcdClient(t, e.Endpoints()...)
	const value = `{"service":"billing","pid":1}`
	if err := c.Set(ctx, "lock:order:8", "tok 1 "+value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	entry := etcdlock.DefaultPrefix + "lock:order:8\x00" + "00000000000000ff"
	if _, err := ec.Put(ctx, entry, value); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("agent")
	cfg.Redis = []string{"redis://" + r.Addr()}
	cfg.Etcd = e.Endpoints()
	cfg.RemediationToken = "t0k"
	a := start(t, cfg)
	redisStore, etcdStore := a.stores[0].name, a.stores[1].name
	redisVersion := sha1hex("tok 1 " + value)
	for _, tc := range []struct {
		name, store string
		ifMatch     []string
		body        string
	}{
		{"not quoted", redisStore, []string{redisVersion}, `not a quoted version`},
		{"weak", redisStore, []string{`W/"` + redisVersion + `"`}, "weak"},
		{"any version", redisStore, []string{"*"}, "without If-Match"},
		{"a list", redisStore, []string{`"` + redisVersion + `", "` + redisVersion + `"`}, "one version"},
		{"two headers", redisStore, []string{quoted(redisVersion), quoted(redisVersion)}, "one If-Match"},
		{"empty", redisStore, []string{`""`}, "empty"},
		{"an etcd version on Redis", redisStore, []string{`"12345"`}, "40 hex digits"},
		{"a Redis version on etcd", etcdStore, []string{quoted(redisVersion)}, "mod revision"},
		{"zero on etcd", etcdStore, []string{`"0"`}, "mod revision"},
		{"a leading zero on etcd", etcdStore, []string{`"07"`}, "mod revision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := "key=lock:order:8&store=" + tc.store
			if code, body := delIfMatch(t, a, q, "t0k", tc.ifMatch...); code != http.StatusBadRequest || !strings.Contains(body, tc.body) || !strings.Contains(body, "If-Match") {
				t.Errorf("If-Match %q: %d %s, want 400 naming If-Match and saying %q", tc.ifMatch, code, body, tc.body)
			}
		})
	}
	if n, _ := c.Exists(ctx, "lock:order:8").Result(); n != 1 {
		t.Error("the Redis lock was deleted")
	}
	if resp, err := ec.Get(ctx, entry); err != nil || len(resp.Kvs) != 1 {
		t.Errorf("the etcd lock was deleted (%v)", err)
	}
}

// TestRecord_VersionsSurviveTheLeadersRecord: followers serve the record
// the leader published as JSON; the versions of its locks and findings
// come back, so a DELETE sent through a follower's console carries them.
func TestRecord_VersionsSurviveTheLeadersRecord(t *testing.T) {
	const published = `{"findings":[{"detector":"locks","kind":"immortal","key":"lock:a","version":"3f786850e387550fdab836ed7e6dc881de23001b"}],` +
		`"locks":[{"store":"s","key":"lock:a","ttl_seconds":-1,"immortal":true,"version":"3f786850e387550fdab836ed7e6dc881de23001b"}]}`
	var rec record
	if err := json.Unmarshal([]byte(published), &rec); err != nil {
		t.Fatal(err)
	}
	served, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(served), `"version":"3f786850e387550fdab836ed7e6dc881de23001b"`); n != 2 {
		t.Fatalf("the record %s is served as %s: %d versions, want the lock's and the finding's", published, served, n)
	}
}
