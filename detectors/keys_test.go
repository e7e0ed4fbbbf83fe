package detectors_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/etcdlock"
)

// Another application's keys under a scanned pattern need not be UTF-8;
// lossyKey is what encoding/json writes for rawKey, and another key.
const (
	rawKey   = "lock:\xff\xfe"
	lossyKey = "lock:\uFFFD\uFFFD"
)

// TestFinding_JSON_AKeyThatIsNotUTF8RoundTripsThroughKeyBase64: a key that
// is not UTF-8 is also written as key_base64 (standard base64 of its bytes),
// and read back exact; a UTF-8 key is written as before, without it.
func TestFinding_JSON_AKeyThatIsNotUTF8RoundTripsThroughKeyBase64(t *testing.T) {
	for _, tc := range []struct{ key, field string }{
		{rawKey, `"key":"lock:\ufffd\ufffd","key_base64":"bG9jazr//g==",`},
		{lossyKey, `"key":"lock:` + "\uFFFD\uFFFD" + `","key_pattern"`},
	} {
		b, err := json.Marshal(detectors.Finding{Detector: "locks", Kind: "immortal", Key: tc.key})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tc.field) || !utf8.Valid(b) {
			t.Errorf("%q: %s, want %s", tc.key, b, tc.field)
		}
		var back detectors.Finding
		if err := json.Unmarshal(b, &back); err != nil || back.Key != tc.key {
			t.Errorf("%q read back as %q (%v)", tc.key, back.Key, err)
		}
	}
}

// argv runs a shell command line in bash with cli (redis-cli, etcdctl)
// defined as a function that prints its arguments, and returns them: what
// an operator's shell would pass to the real command.
func argv(t *testing.T, cli, line string) []string {
	t.Helper()
	out, err := exec.Command("bash", "-c", cli+`() { printf '%s\0' "$@"; }; `+line).Output()
	if err != nil {
		t.Fatalf("bash -c %q: %v", line, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// TestLocks_TheActionForAKeyThatIsNotUTF8NamesThatKey: the redis-cli and
// etcdctl commands of a finding, pasted into a shell, act on the key found
// (not on the key with U+FFFD, which may be another lock), and are UTF-8
// text themselves. redis-cli does not unescape its arguments (only its
// interactive prompt reads "\xff"): the shell must pass the bytes ($'…').
func TestLocks_TheActionForAKeyThatIsNotUTF8NamesThatKey(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash: the Actions are shell command lines")
	}
	ctx := timeout(t, time.Minute)
	t.Run("redis", func(t *testing.T) {
		c := newRedis(t)
		for _, k := range []string{rawKey, lossyKey} {
			if err := c.Set(ctx, k, "another app's lock", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d, err := detectors.NewLocks(redisStore(t, c))
		if err != nil {
			t.Fatal(err)
		}
		f, ok := byKey(detect(t, ctx, d), detectors.KindImmortal)[rawKey]
		if !ok || !utf8.ValidString(f.Action) {
			t.Fatalf("no immortal finding on %q, or its Action is not UTF-8: %+v", rawKey, f)
		}
		if _, err := exec.LookPath("redis-cli"); err == nil {
			// The real command, on the real server.
			if out, err := exec.Command("bash", "-c", f.Action).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", f.Action, err, out)
			}
			if ttl, _ := c.PTTL(ctx, rawKey).Result(); ttl <= 0 {
				t.Errorf("after %s, %q has TTL %v: the command named another key", f.Action, rawKey, ttl)
			}
			if ttl, _ := c.PTTL(ctx, lossyKey).Result(); ttl != -1 {
				t.Errorf("after %s, %q has TTL %v: the command named it", f.Action, lossyKey, ttl)
			}
		}
		if args := argv(t, "redis-cli", f.Action); len(args) < 2 || args[len(args)-2] != rawKey {
			t.Errorf("%s passes %q to redis-cli, want the key %q before the TTL", f.Action, args, rawKey)
		}
	})
	t.Run("etcd", func(t *testing.T) {
		e := newEtcd(t)
		foreign := etcdlock.DefaultPrefix + "orders/\xff"
		if _, err := e.Put(ctx, foreign, "another app's lock"); err != nil {
			t.Fatal(err)
		}
		d, err := detectors.NewLocks(etcdStore(t, e))
		if err != nil {
			t.Fatal(err)
		}
		f, ok := byKey(detect(t, ctx, d), detectors.KindImmortal)[foreign]
		if !ok || !utf8.ValidString(f.Action) {
			t.Fatalf("no immortal finding on %q, or its Action is not UTF-8: %+v", foreign, f)
		}
		// "etcdctl … get KEY   # then, once its holder is confirmed gone: etcdctl … del KEY"
		getCmd, delCmd, ok := strings.Cut(f.Action, "#")
		if _, after, found := strings.Cut(delCmd, ": "); ok && found {
			delCmd = after
		}
		for verb, line := range map[string]string{"get": getCmd, "del": delCmd} {
			args := argv(t, "etcdctl", line)
			if len(args) < 2 || args[len(args)-2] != verb || args[len(args)-1] != foreign {
				t.Errorf("%q passes %q to etcdctl, want %s %q", line, args, verb, foreign)
			}
		}
	})
}
