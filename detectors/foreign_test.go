package detectors_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/etcdlock"
)

// TestLocks_ValuesNoDecoderKnowsAreForeign puts values no decoder knows
// under lock keys on Redis (garbage, binary, JSON of another library, a
// truncated lockgov value, a hash) and etcd: each immortal one is reported
// with a foreign holder; the scan never fails.
func TestLocks_ValuesNoDecoderKnowsAreForeign(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := newRedis(t)
	values := map[string]string{
		"lock:f:empty":     "",
		"lock:f:binary":    "\x00\xff\xfe{\"",
		"lock:f:json":      `{"owner":"x","expires":1}`,
		"lock:f:truncated": `tok 7 {"service":"a","pid":`,
		"lock:f:badfence":  `tok x {"service":"a","pid":1}`,
		"lock:f:huge":      strings.Repeat("a", 1<<20),
	}
	for k, v := range values {
		if err := c.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.HSet(ctx, "lock:f:hash", "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	d, err := detectors.NewLocks(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	fs := detect(t, ctx, d)
	got := byKey(fs, detectors.KindImmortal)
	if len(fs) != len(values)+1 || len(got) != len(values)+1 {
		t.Fatalf("want %d immortal findings:%s", len(values)+1, describe(fs))
	}
	for k, f := range got {
		if f.Holder == nil || !f.Holder.Foreign {
			t.Errorf("%s: holder %+v, want foreign", k, f.Holder)
		}
		// No TTL reads as PTTL and /api/v1/locks say it, not as 0.
		if b, _ := json.Marshal(f); f.TTL != -time.Second || !strings.Contains(string(b), `"ttl_seconds":-1,`) {
			t.Errorf("%s: TTL %v, JSON %s; want -1s, ttl_seconds -1", k, f.TTL, b)
		}
	}

	e := newEtcd(t)
	for k, v := range map[string]string{"lock:g\x000000000000000001": "\x00garbage", "other": `{"pid":"x"}`} {
		if _, err := e.Put(ctx, etcdlock.DefaultPrefix+k, v); err != nil {
			t.Fatal(err)
		}
	}
	de, err := detectors.NewLocks(etcdStore(t, e))
	if err != nil {
		t.Fatal(err)
	}
	fs = detect(t, ctx, de)
	if len(fs) != 2 {
		t.Fatalf("etcd: want 2 findings:%s", describe(fs))
	}
	for _, f := range fs {
		if f.Kind != detectors.KindImmortal || !f.Holder.Foreign || f.TTL != -time.Second {
			t.Errorf("etcd: %+v", f)
		}
	}
}

// TestFinding_JSON: snake_case names, durations in seconds, and no owner
// token from a redislock value.
func TestFinding_JSON(t *testing.T) {
	f := detectors.Finding{Detector: "locks", Kind: "immortal", Severity: "critical", Store: "redis://h:1",
		Key: "lock:a", KeyPattern: "lock:{id}", Holder: &detectors.Holder{Service: "s", PID: 1},
		Age: 1500 * time.Millisecond, TTL: 2 * time.Second, Detail: "d", Action: "a"}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"detector":"locks","kind":"immortal","severity":"critical","store":"redis://h:1","key":"lock:a","key_pattern":"lock:{id}","holder":{"service":"s","pid":1},"age_seconds":1.5,"ttl_seconds":2,"detail":"d","action":"a"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back detectors.Finding
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Age != f.Age || back.TTL != f.TTL || back.Holder.Service != "s" {
		t.Fatalf("round trip: %+v", back)
	}
}

// TestLocks_NoOwnerTokenInFindings: a real redislock value's token never
// appears in a finding.
func TestLocks_NoOwnerTokenInFindings(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := newRedis(t)
	const tok = "SECRETTOKEN123"
	if err := c.Set(ctx, "lock:t", tok+` 9 {"service":"s","pid":1,"fence":9}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := detectors.NewLocks(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	fs := detect(t, ctx, d)
	b, _ := json.Marshal(fs)
	if len(fs) != 1 || strings.Contains(string(b), tok) {
		t.Fatalf("findings %s", b)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://user:secret@h:6380/1":                 "redis://user@h:6380/1",
		"rediss://:secret@h:6380":                      "rediss://h:6380",
		"redis-sentinel://h:26379?password=x&master=m": "redis-sentinel://h:26379?master=m",
		"h:1":                   "h:1",
		"bad url with :pw@host": "host",
	} {
		if got := detectors.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGlobFromPattern(t *testing.T) {
	for in, want := range map[string]string{
		"lock:quota:{merchant_id}": "lock:quota:*",
		"lock:{a}:x:{b}":           "lock:*:x:*",
		"lock:[odd]*":              `lock:\[odd\]\*`,
	} {
		if got := detectors.GlobFromPattern(in); got != want {
			t.Errorf("GlobFromPattern(%q) = %q, want %q", in, got, want)
		}
	}
}
