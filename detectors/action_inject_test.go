package detectors_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/etcdlock"
)

// hostileKeys are keys crafted to break out of a quoted argument: each
// would create the file "pwned" in the shell's directory if its quoting
// let the shell run what it holds.
var hostileKeys = []string{
	"lock:q'; touch pwned; '", `lock:q"; touch pwned; "`, "lock:$(touch pwned)", "lock:`touch pwned`",
	"lock:q\ntouch pwned", "lock:q\rtouch pwned", "lock:q\\'$(touch pwned)'", "lock:q$'\\x27'; touch pwned",
	"lock:q;touch pwned", "lock:q|touch pwned", "lock:q&touch pwned", "lock:q>pwned", "lock:q #; touch pwned",
	"lock:q\x1b]0;title\a", "lock:q\u202e", "lock:q\x00touch pwned", "lock:!! touch pwned", "lock:q\xff'\xfe",
	"lock:-h", "lock:*", "lock:~", "lock:q{a,b}",
}

// TestLocks_AHostileKeyCannotBreakOutOfTheAction: the command of an
// immortal lock's finding (redis-cli PEXPIRE; etcdctl get and del), run
// by bash with the CLI replaced by a function that prints its arguments,
// passes the key as one argument with its exact bytes and runs nothing
// else: no key, whatever quotes, substitutions, separators, newlines or
// escape sequences it holds, creates the file "pwned". The command is
// printable ASCII. A key with a NUL, which no shell argument carries, is
// never named by a command cut at its NUL ($'lock:q\x00…' passes lock:q,
// another key, whose lock PEXPIRE or DEL would change): on etcd a queue
// entry is named by its lease, on Redis the action says how else to act.
func TestLocks_AHostileKeyCannotBreakOutOfTheAction(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash not found:", err)
	}
	ctx := timeout(t, time.Minute)
	dir := t.TempDir()
	run := func(t *testing.T, cli, line, key string) {
		t.Helper()
		for _, r := range line {
			if r < 0x20 || r > 0x7e {
				t.Errorf("action %q holds %U: not printable ASCII", line, r)
			}
		}
		if strings.Contains(key, "\x00") && !strings.HasPrefix(line, cli+" ") {
			if !strings.Contains(line, "NUL") {
				t.Errorf("action %q of %q: no command, and no word of why", line, key)
			}
			return // says what to do instead, no command to run
		}
		cmd := exec.Command("bash", "-c", cli+`() { printf '%s\0' "$@"; }; `+line)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("bash -c %q: %v", line, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
			t.Fatalf("the action of %q ran a command of its own: %s", key, line)
		}
		args := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if before, _, ok := strings.Cut(key, "\x00"); ok {
			for _, a := range args {
				if a == before {
					t.Errorf("%s passes %q: the key %q cut at its NUL, another key", line, args, key)
				}
			}
			return
		}
		found := 0
		for _, a := range args {
			if a == key {
				found++
			}
		}
		if found != 1 {
			t.Errorf("%s passes %q, want the key %q once", line, args, key)
		}
	}
	t.Run("redis", func(t *testing.T) {
		c := newRedis(t)
		for _, k := range hostileKeys {
			if err := c.Set(ctx, k, "another app's lock", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d, err := detectors.NewLocks(redisStore(t, c))
		if err != nil {
			t.Fatal(err)
		}
		immortal := byKey(detect(t, ctx, d), detectors.KindImmortal)
		for _, k := range hostileKeys {
			f, ok := immortal[k]
			if !ok {
				t.Errorf("no immortal finding on %q", k)
				continue
			}
			run(t, "redis-cli", f.Action, k)
		}
	})
	t.Run("etcd", func(t *testing.T) {
		e := newEtcd(t)
		for _, k := range hostileKeys {
			if strings.Contains(k, "\x00") {
				continue // a queue entry's name: freed by lease revoke
			}
			if _, err := e.Put(ctx, etcdlock.DefaultPrefix+k, "another app's lock"); err != nil {
				t.Fatal(err)
			}
		}
		d, err := detectors.NewLocks(etcdStore(t, e))
		if err != nil {
			t.Fatal(err)
		}
		immortal := byKey(detect(t, ctx, d), detectors.KindImmortal)
		for _, k := range hostileKeys {
			if strings.Contains(k, "\x00") {
				continue
			}
			f, ok := immortal[etcdlock.DefaultPrefix+k]
			if !ok {
				t.Errorf("no immortal finding on %q", etcdlock.DefaultPrefix+k)
				continue
			}
			// "etcdctl ... get K   # then, once ...: etcdctl ... del K":
			// each command on its own, as an operator pastes it.
			get, del, ok := strings.Cut(f.Action, "   # then, once its holder is confirmed gone: ")
			if !ok {
				t.Errorf("action %q: want a get, then a del", f.Action)
				continue
			}
			run(t, "etcdctl", get, etcdlock.DefaultPrefix+k)
			run(t, "etcdctl", del, etcdlock.DefaultPrefix+k)
		}
	})
}
