package detectors_test

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/etcdlock"
)

// TestLocks_AFindingOfALockWithoutTTLCarriesItsVersion: the findings of a
// lock without a TTL (the locks the agent's remediation deletes) carry the
// lock's version, the precondition a DELETE sends as If-Match, and its JSON
// reads back: on Redis the SHA-1 of the value in hex (redis.sha1hex in a
// script), never the value nor its owner token; on etcd the holder entry's
// mod revision. A finding of a lock with a TTL has none.
func TestLocks_AFindingOfALockWithoutTTLCarriesItsVersion(t *testing.T) {
	t.Parallel()
	const value = `{"service":"billing","pid":1}`
	for _, backend := range []string{"redis", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			ctx := timeout(t, time.Minute)
			var s detectors.Store
			var immortal, leased, want string
			if backend == "redis" {
				c := newRedis(t)
				s = redisStore(t, c)
				immortal, leased = "lock:immortal:1", "lock:short:1"
				if err := c.Set(ctx, immortal, "tok-secret 7 "+value, 0).Err(); err != nil {
					t.Fatal(err)
				}
				if err := c.Set(ctx, leased, "tok-secret 8 "+value, 24*time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				sum := sha1.Sum([]byte("tok-secret 7 " + value))
				want = hex.EncodeToString(sum[:])
			} else {
				c := newEtcd(t)
				s = etcdStore(t, c)
				immortal, leased = "lock:immortal:1", "lock:short:1"
				entry := etcdlock.DefaultPrefix + immortal + "\x00" + "00000000000000ff"
				if _, err := c.Put(ctx, entry, value); err != nil {
					t.Fatal(err)
				}
				// Written again: the version is the last write's revision,
				// not the entry's creation.
				resp, err := c.Put(ctx, entry, value)
				if err != nil {
					t.Fatal(err)
				}
				want = strconv.FormatInt(resp.Header.Revision, 10)
				g, err := c.Grant(ctx, 24*3600)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Put(ctx, etcdlock.DefaultPrefix+leased+"\x00"+"00000000000000fe", value, clientv3.WithLease(g.ID)); err != nil {
					t.Fatal(err)
				}
			}
			d, err := detectors.NewLocks(s, detectors.WithPolicy(loadPolicy(t)))
			if err != nil {
				t.Fatal(err)
			}
			var seen int
			for _, f := range detect(t, ctx, d) {
				b, err := json.Marshal(f)
				if err != nil {
					t.Fatal(err)
				}
				var back struct{ Version string }
				if err := json.Unmarshal(b, &back); err != nil {
					t.Fatal(err)
				}
				switch f.Key {
				case immortal:
					seen++
					if back.Version != want {
						t.Errorf("%s finding of %s: version %q in %s, want %q", f.Kind, f.Key, back.Version, b, want)
					}
					var again detectors.Finding
					if err := json.Unmarshal(b, &again); err != nil {
						t.Fatal(err)
					}
					if b2, _ := json.Marshal(again); string(b2) != string(b) {
						t.Errorf("the finding read back writes\n%s\nnot\n%s", b2, b)
					}
				case leased:
					seen++
					if back.Version != "" {
						t.Errorf("%s finding of %s, which has a TTL: version %q", f.Kind, f.Key, back.Version)
					}
				}
				if strings.Contains(string(b), "tok-secret") {
					t.Errorf("a finding carries the owner token: %s", b)
				}
			}
			if seen < 2 {
				t.Fatalf("want findings of %s and %s", immortal, leased)
			}
		})
	}
}
