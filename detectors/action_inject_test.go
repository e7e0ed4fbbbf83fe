package detectors_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/shellquote"
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

// hostileNames are holder names (service, instance, host, trace id) that
// a lock value or a heartbeat carries, as JSON: UTF-8 only.
var hostileNames = struct{ service, instance, host, trace string }{
	"svc'; touch pwned; '", "pod$(touch pwned)\n#", "host`touch pwned`\x1b[2J", "trace;touch pwned",
}

// cliCall is one call of a CLI the action names: the CLI, then its
// arguments as bash passed them.
type cliCall []string

// bashRun runs line with bash, in an empty directory and with an empty
// PATH: only builtins and the functions that stand in for redis-cli and
// etcdctl (they print their arguments) can run. Any other command (a word
// of prose outside the comment, or one a name smuggled in) reaches
// command_not_found_handle, which says so on stderr; a redirection leaves
// a file in the directory. Either fails the test, as does a line bash
// cannot parse.
func bashRun(t *testing.T, line string) []cliCall {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash not found:", err)
	}
	dir := t.TempDir()
	script := `command_not_found_handle() { printf 'ran a command of its own: %q\n' "$1" >&2; return 127; }
stub() { printf '%s\0' "$#" "$@"; }
redis-cli() { stub redis-cli "$@"; }
etcdctl() { stub etcdctl "$@"; }
` + line + "\n"
	cmd := exec.Command(bash, "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + filepath.Join(dir, "no-such-dir")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Errorf("bash -c %q: %v %s", line, err, stderr.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("bash -c %q created %s: a redirection of its own", line, ents[0].Name())
	}
	var calls []cliCall
	fields := strings.Split(string(out), "\x00")
	for len(fields) > 1 {
		n, err := strconv.Atoi(fields[0])
		if err != nil || n < 1 || len(fields) < n+1 {
			t.Fatalf("bash -c %q printed %q", line, out)
		}
		calls = append(calls, cliCall(fields[1:n+1]))
		fields = fields[n+1:]
	}
	return calls
}

// want is what an action should do: run cli with arg once when pasted
// whole ("" for a line that is only a comment, which runs nothing), and
// end its comment with ": " and a command that passes free once ("" for
// none). read, when set, checks what that one command reads.
type want struct {
	cli, arg, free string
	read           func(t *testing.T, call cliCall)
}

// checkAction checks a finding's action: printable ASCII on one line;
// pasted whole into bash it runs w.arg's command and nothing else; the
// command that ends its comment, copied on its own, runs with w.free as
// one argument and nothing else; and each of names is in it only as
// shellquote quotes it, so that copied it pastes as one argument.
func checkAction(t *testing.T, f detectors.Finding, w want, names ...string) {
	t.Helper()
	line := f.Action
	for _, r := range line {
		if r < 0x20 || r > 0x7e {
			t.Errorf("%s %q: action %q holds %U: not printable ASCII", f.Kind, f.Key, line, r)
		}
	}
	once := func(what string, calls []cliCall, arg string) {
		t.Helper()
		if len(calls) != 1 || calls[0][0] != w.cli {
			t.Errorf("%s %q: %s %q runs %q, want one %s", f.Kind, f.Key, what, line, calls, w.cli)
			return
		}
		n := 0
		for _, a := range calls[0][1:] {
			if a == arg {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s %q: %s %q passes %q, want %q once", f.Kind, f.Key, what, line, calls[0], arg)
		}
	}
	calls := bashRun(t, line)
	if w.arg == "" {
		if len(calls) != 0 || !strings.HasPrefix(line, "# ") {
			t.Errorf("%s %q: action %q runs %q, want a comment that runs nothing", f.Kind, f.Key, line, calls)
		}
	} else {
		once("pasted whole, action", calls, w.arg)
		if w.read != nil && len(calls) == 1 {
			w.read(t, calls[0])
		}
	}
	if w.free != "" {
		i := strings.LastIndex(line, ": "+w.cli+" ")
		if i < 0 {
			t.Errorf("%s %q: action %q does not end with a %s command", f.Kind, f.Key, line, w.cli)
		} else {
			once("the command that ends", bashRun(t, line[i+2:]), w.free)
		}
	}
	for _, n := range names {
		q := shellquote.Quote(n)
		if !strings.Contains(line, q) || strings.Count(line, n) != strings.Count(line, q)*strings.Count(q, n) {
			t.Errorf("%s %q: action %q names %q other than as %s", f.Kind, f.Key, line, n, q)
		}
	}
}

// holderNames are the names of f's holder: service, instance, host, trace id.
func holderNames(t *testing.T, f detectors.Finding) []string {
	t.Helper()
	h := f.Holder
	if h == nil || h.Service != hostileNames.service || h.Instance != hostileNames.instance ||
		h.Host != hostileNames.host || h.TraceID != hostileNames.trace {
		t.Fatalf("%s %q: holder %+v, want the hostile names", f.Kind, f.Key, h)
	}
	return []string{h.Service, h.Instance, h.Host, h.TraceID}
}

// hostileValue is a lock value JSON of a process that hostileNames name,
// acquired now, with a TTL of ttl.
func hostileValue(ttl time.Duration) string {
	n := hostileNames
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) } // %q writes \x1b, which JSON does not read
	return fmt.Sprintf(`{"service":%s,"instance":%s,"host":%s,"pid":4242,"v":"test","trace_id":%s,"ttl_ms":%d,"acquired_at_ms":%d,"fence":5}`,
		q(n.service), q(n.instance), q(n.host), q(n.trace), ttl.Milliseconds(), time.Now().UnixMilli())
}

// hostileBeat is the heartbeat of that process.
func hostileBeat() *fleet.Heartbeat {
	hb := otherBeat(hostileNames.instance, 4242)
	hb.Service, hb.Host = hostileNames.service, hostileNames.host
	return hb
}

// TestLocks_AHostileKeyCannotBreakOutOfTheAction: the action of every
// finding kind, pasted whole into bash (with the CLIs replaced by
// functions that print their arguments and nothing else on the PATH),
// runs at most its one command (a read or a TTL), passes the key as one
// argument with its exact bytes, and runs nothing else; the command that
// frees the lock, which ends the comment, does the same copied on its
// own; and every name from a store, a heartbeat or the configuration (a
// key, service, instance, host, trace id) is in it only as shellquote
// quotes it. No key or name, whatever quotes, substitutions, separators,
// newlines or escape sequences it holds, runs a command of its own. The
// action is printable ASCII. A key with a NUL, which no shell argument
// carries, is never named by a command cut at its NUL ($'lock:q\x00…'
// passes lock:q, another key, whose lock PEXPIRE or DEL would change): on
// etcd a queue entry is named by its lease, on Redis the action says how
// else to act.
func TestLocks_AHostileKeyCannotBreakOutOfTheAction(t *testing.T) {
	t.Parallel()
	// The subtests run in parallel, each on servers of its own and under a
	// context of its own (from timeout: it ends in the subtest's Cleanup).
	// What they share from here is only read: later, suffix, checkLocks,
	// keys and beat.
	later := func() time.Time { return time.Now().Add(2 * time.Minute) }
	suffix := func(k string) string { return strings.TrimPrefix(k, "lock:") }
	// Every lock kind of every hostile key: immortal (lock:K, no TTL),
	// ttl_above_max (lock:short:K, 1h), held_too_long (lock:hold:K, held
	// 2m), holder_dead (lock:dead:K, its process's heartbeats gone); the
	// holder of the last three is named by hostileNames.
	checkLocks := func(t *testing.T, ctx context.Context, d detectors.Detector, beats any, want func(f detectors.Finding) want) {
		putBeat(t, ctx, beats, hostileBeat())
		detect(t, ctx, d)
		delBeat(t, ctx, beats, hostileNames.instance)
		kinds := map[string]int{}
		for _, f := range detect(t, ctx, d) {
			kinds[f.Kind]++
			var names []string
			switch f.Kind {
			case detectors.KindHeldTooLong: // names the holder and its trace
				names = holderNames(t, f)
			case detectors.KindHolderDead:
				names = holderNames(t, f)[:3]
			}
			checkAction(t, f, want(f), names...)
		}
		for _, k := range []string{detectors.KindImmortal, detectors.KindTTLAboveMax, detectors.KindHeldTooLong, detectors.KindHolderDead} {
			if kinds[k] < 3 {
				t.Errorf("%d %s findings, want one per key: %v", kinds[k], k, kinds)
			}
		}
	}
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		ctx := timeout(t, 2*time.Minute)
		c := newRedis(t)
		for _, k := range hostileKeys {
			s := suffix(k)
			for key, v := range map[string]struct {
				value string
				ttl   time.Duration
			}{
				k: {"another app's lock", 0}, "lock:short:" + s: {"another app's lock", time.Hour},
				"lock:hold:" + s: {"tok 5 " + hostileValue(time.Minute), time.Minute},
				"lock:dead:" + s: {"tok 5 " + hostileValue(time.Minute), time.Minute},
			} {
				if err := c.Set(ctx, key, v.value, v.ttl).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		d, err := detectors.NewLocks(redisStore(t, c), detectors.WithPolicy(loadPolicy(t)), detectors.WithNow(later),
			detectors.WithPatterns("lock:*"))
		if err != nil {
			t.Fatal(err)
		}
		checkLocks(t, ctx, d, c, func(f detectors.Finding) want {
			if strings.Contains(f.Key, "\x00") {
				if !strings.Contains(f.Action, "NUL") {
					t.Errorf("action %q of %q: no command, and no word of why", f.Action, f.Key)
				}
				return want{cli: "redis-cli"} // says what to do instead, no command to run
			}
			if f.Kind == detectors.KindImmortal || f.Kind == detectors.KindTTLAboveMax {
				return want{cli: "redis-cli", arg: f.Key} // PEXPIRE
			}
			return want{cli: "redis-cli", free: f.Key} // DEL
		})
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		ctx := timeout(t, 2*time.Minute)
		e := newEtcd(t)
		// A lease per entry, as etcdlock grants one per Acquire (lease
		// revoke frees the entry then; a lease that holds other keys:
		// TestLocks_TheEtcdCommandThatFreesAQueueEntryFreesThatLockOnly).
		leases := map[string]clientv3.LeaseID{}
		entry := func(key string) string {
			return etcdlock.DefaultPrefix + key + "\x00" + fmt.Sprintf("%016x", int64(leases[key]))
		}
		for _, k := range hostileKeys {
			if strings.Contains(k, "\x00") {
				continue // etcdlock writes no such key (instrument.ValidateKey)
			}
			s := suffix(k)
			// Another writer's entry without a lease: immortal.
			if _, err := e.Put(ctx, etcdlock.DefaultPrefix+k, "another app's lock"); err != nil {
				t.Fatal(err)
			}
			// Each lock beside another whose name begins with its own
			// (lock:short:K and lock:short:K-b): a read of one lists
			// nothing of the other.
			for _, key := range []string{"lock:short:" + s, "lock:hold:" + s, "lock:dead:" + s} {
				for _, key := range []string{key, key + "-b"} {
					lease, err := e.Grant(ctx, 3600)
					if err != nil {
						t.Fatal(err)
					}
					leases[key] = lease.ID
					if _, err := e.Put(ctx, entry(key), hostileValue(time.Hour), clientv3.WithLease(lease.ID)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		d, err := detectors.NewLocks(etcdStore(t, e), detectors.WithPolicy(loadPolicy(t)), detectors.WithNow(later))
		if err != nil {
			t.Fatal(err)
		}
		checkLocks(t, ctx, d, e, func(f detectors.Finding) want {
			if strings.HasPrefix(f.Key, etcdlock.DefaultPrefix) { // another writer's entry: get, then del
				return want{cli: "etcdctl", arg: f.Key, free: f.Key, read: etcdReads(ctx, e, f.Key)}
			}
			revoke := strconv.FormatInt(int64(leases[f.Key]), 16)
			if f.Kind == detectors.KindImmortal || f.Kind == detectors.KindTTLAboveMax {
				// The get of the lock's queue, then lease revoke.
				return want{cli: "etcdctl", arg: etcdlock.DefaultPrefix + f.Key, free: revoke, read: etcdReads(ctx, e, entry(f.Key))}
			}
			return want{cli: "etcdctl", free: revoke}
		})
	})
	// The deadlock detector reads keys and names from heartbeats (JSON:
	// UTF-8 only). One cycle through every key: instance i holds key i
	// and waits for key i+1.
	var keys []string
	for _, k := range hostileKeys {
		if utf8.ValidString(k) {
			keys = append(keys, k)
		}
	}
	beat := func(i int) *fleet.Heartbeat {
		hb := otherBeat("pod"+suffix(keys[i]), 100+i)
		hb.Service, hb.Host = "svc"+suffix(keys[i]), "host"+suffix(keys[i])
		return hb
	}
	t.Run("deadlock", func(t *testing.T) {
		t.Parallel()
		ctx := timeout(t, 2*time.Minute)
		c := newRedis(t)
		since := time.Now().Add(-time.Minute)
		var names []string
		for i, k := range keys {
			next := keys[(i+1)%len(keys)]
			hb := beat(i)
			hb.Held = []fleet.HeldLock{{Key: k, Since: since}}
			hb.Waiting = []fleet.WaitingLock{{Key: next, Since: since, HoldsWhileWaiting: []string{k}}}
			putBeat(t, ctx, c, hb)
			names = append(names, k, hb.Instance, hb.Service, hb.Host)
		}
		d, err := detectors.NewDeadlock(redisStore(t, c))
		if err != nil {
			t.Fatal(err)
		}
		fs := detect(t, ctx, d)
		if len(fs) != 1 || fs[0].Kind != detectors.KindDeadlock {
			t.Fatalf("want one deadlock:%s", describe(fs))
		}
		checkAction(t, fs[0], want{}, names...)
	})
	t.Run("lock_order_inversion", func(t *testing.T) {
		t.Parallel()
		ctx := timeout(t, 2*time.Minute)
		// a holds every key but the first while waiting for the first; later
		// b holds the first while waiting for each of the others.
		c := newRedis(t)
		d, err := detectors.NewDeadlock(redisStore(t, c))
		if err != nil {
			t.Fatal(err)
		}
		a, b := beat(0), beat(1)
		for _, k := range keys[1:] {
			a.Held = append(a.Held, fleet.HeldLock{Key: k})
		}
		a.Waiting = []fleet.WaitingLock{{Key: keys[0], HoldsWhileWaiting: keys[1:]}}
		putBeat(t, ctx, c, a)
		detect(t, ctx, d)
		delBeat(t, ctx, c, a.Instance)
		b.Held = []fleet.HeldLock{{Key: keys[0]}}
		for _, k := range keys[1:] {
			b.Waiting = append(b.Waiting, fleet.WaitingLock{Key: k, HoldsWhileWaiting: keys[:1]})
		}
		putBeat(t, ctx, c, b)
		fs := detect(t, ctx, d)
		if len(fs) != len(keys)-1 {
			t.Fatalf("want %d lock_order_inversion findings:%s", len(keys)-1, describe(fs))
		}
		for _, f := range fs {
			if f.Kind != detectors.KindLockOrderInversion {
				t.Fatalf("want lock_order_inversion:%s", describe(fs))
			}
			other := keys[0]
			if f.Key == keys[0] {
				other = ""
				for _, k := range keys[1:] {
					if strings.Contains(f.Action, shellquote.Quote(k)) {
						other = k
					}
				}
			}
			checkAction(t, f, want{}, f.Key, other)
		}
	})
	t.Run("clock", func(t *testing.T) {
		t.Parallel()
		ctx := timeout(t, 2*time.Minute)
		c := newRedis(t)
		var hosts []string
		for i := range keys {
			hb := beat(i)
			hb.Clock = &fleet.ClockSample{Offset: time.Second, RTT: time.Millisecond, MeasuredAt: time.Now()}
			putBeat(t, ctx, c, hb)
			hosts = append(hosts, hb.Host)
		}
		d, err := detectors.NewClock(redisStore(t, c))
		if err != nil {
			t.Fatal(err)
		}
		fs := detect(t, ctx, d)
		if len(fs) != len(keys) {
			t.Fatalf("want %d skew findings:%s", len(keys), describe(fs))
		}
		for _, f := range fs {
			checkAction(t, f, want{}, f.Holder.Host)
		}
		if t.Failed() {
			t.Logf("hosts %q", hosts)
		}
	})
	t.Run("workerid", func(t *testing.T) {
		t.Parallel()
		ctx := timeout(t, 2*time.Minute)
		// Per key: two instances report WorkerID 3 of service svcK (a
		// duplicate, and the slot K is gone: lease_gone from the second
		// beat); a third reports 99 (out of range); every service's range
		// overlaps the others'.
		c := newRedis(t)
		var opts []detectors.Option
		for i, k := range keys {
			svc := "svc" + suffix(k)
			opts = append(opts, detectors.WithServiceRange(svc, 0, 9))
			for j, id := range []int64{3, 3, 99} {
				hb := otherBeat(fmt.Sprintf("pod%d-%d%s", i, j, suffix(k)), 1000*i+j)
				hb.WorkerIDs = []fleet.WorkerID{{Service: svc, ID: id, Key: k}}
				putBeat(t, ctx, c, hb)
			}
		}
		d, err := detectors.NewWorkerIDs(redisStore(t, c), append(opts, detectors.WithMaxFindings(10000))...)
		if err != nil {
			t.Fatal(err)
		}
		detect(t, ctx, d)
		for i, k := range keys {
			for j, id := range []int64{3, 3, 99} {
				hb := otherBeat(fmt.Sprintf("pod%d-%d%s", i, j, suffix(k)), 1000*i+j)
				hb.SentAt = hb.SentAt.Add(fleet.DefaultPeriod)
				hb.WorkerIDs = []fleet.WorkerID{{Service: "svc" + suffix(k), ID: id, Key: k}}
				putBeat(t, ctx, c, hb)
			}
		}
		kinds := map[string]int{}
		for _, f := range detect(t, ctx, d) {
			kinds[f.Kind]++
			var names []string
			w := want{}
			switch f.Kind {
			case detectors.KindWorkerIDDuplicate, detectors.KindWorkerIDLeaseGone:
				if strings.Contains(f.Key, "\x00") {
					if !strings.Contains(f.Action, "NUL") {
						t.Errorf("action %q of %q: no command, and no word of why", f.Action, f.Key)
					}
					break // no get cut at the NUL: it would show another key
				}
				w = want{cli: "redis-cli", arg: f.Key} // get of the slot
				names = append(names, f.Key)
			}
			if f.Holder != nil && f.Kind != detectors.KindWorkerIDDuplicate {
				names = append(names, f.Holder.Instance)
			}
			for _, k := range keys {
				if svc := "svc" + suffix(k); strings.Contains(f.Action, svc) && f.Kind != detectors.KindWorkerIDOutOfRange {
					names = append(names, svc)
				}
			}
			if f.Kind == detectors.KindWorkerIDOutOfRange {
				svc := "svc" + suffix(strings.TrimPrefix(f.Holder.Instance, fmt.Sprintf("pod%d-2", f.Holder.PID/1000)))
				if !strings.Contains(f.Action, "WithServiceRange("+strconv.QuoteToASCII(svc)+", ") {
					t.Errorf("action %q: want the service %q as Go code", f.Action, svc) // pasted into Go source, not a shell
				}
			}
			checkAction(t, f, w, names...)
		}
		for _, k := range []string{detectors.KindWorkerIDDuplicate, detectors.KindWorkerIDLeaseGone, detectors.KindWorkerIDOutOfRange, detectors.KindWorkerIDRangeOverlap} {
			if kinds[k] < len(keys) {
				t.Errorf("%d %s findings, want at least %d: %v", kinds[k], k, len(keys), kinds)
			}
		}
	})
	t.Run("summary", func(t *testing.T) {
		t.Parallel()
		ctx := timeout(t, 2*time.Minute)
		c := newRedis(t)
		for _, k := range hostileKeys {
			if err := c.Set(ctx, k, "another app's lock", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d, err := detectors.NewLocks(redisStore(t, c), detectors.WithMaxFindings(1))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range detect(t, ctx, d) {
			if f.Key == "" {
				n++
				checkAction(t, f, want{})
			}
		}
		if n != 1 {
			t.Errorf("%d summary findings, want 1", n)
		}
	})
}

// etcdReads returns a check that an etcdctl call reads exactly the keys
// of entry's lock: entry alone, or, when entry's name holds a NUL (which
// no shell argument carries), every entry of its queue, "<key>\x00…", and
// no key of another lock. The call is read as etcdctl reads its
// arguments ("get [--prefix|--from-key] <key> [range_end]", after its
// global flags) and run with the client; and, when etcdctl is installed,
// run with it against the same server.
func etcdReads(ctx context.Context, c *clientv3.Client, entry string) func(t *testing.T, call cliCall) {
	return func(t *testing.T, call cliCall) {
		t.Helper()
		wantKeys := []string{entry}
		if before, _, ok := strings.Cut(entry, "\x00"); ok {
			resp, err := c.Get(ctx, before+"\x00", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				t.Fatal(err)
			}
			wantKeys = wantKeys[:0]
			for _, kv := range resp.Kvs {
				wantKeys = append(wantKeys, string(kv.Key))
			}
		}
		args := call[1:]
		for len(args) > 0 && (strings.HasPrefix(args[0], "--endpoints=") || args[0] == "--user") {
			if args[0] == "--user" {
				args = args[1:]
			}
			args = args[1:]
		}
		if len(args) < 2 || args[0] != "get" {
			t.Fatalf("etcdctl %q: want a get", call[1:])
		}
		var opts []clientv3.OpOption
		var pos []string
		for _, a := range args[1:] {
			switch {
			case a == "--prefix":
				opts = append(opts, clientv3.WithPrefix())
			case a == "--from-key":
				opts = append(opts, clientv3.WithFromKey())
			case strings.HasPrefix(a, "-"):
				t.Fatalf("etcdctl %q: flag %q not read here", call[1:], a)
			default:
				pos = append(pos, a)
			}
		}
		if len(pos) < 1 || len(pos) > 2 || len(pos) == 2 && len(opts) > 0 {
			t.Fatalf("etcdctl %q: not a get etcdctl runs", call[1:])
		}
		if len(pos) == 2 {
			opts = append(opts, clientv3.WithRange(pos[1]))
		}
		resp, err := c.Get(ctx, pos[0], append(opts, clientv3.WithKeysOnly())...)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range resp.Kvs {
			got = append(got, string(kv.Key))
		}
		if !slices.Equal(got, wantKeys) {
			t.Errorf("etcdctl %q reads %q, want %q", call[1:], got, wantKeys)
		}
		bin, err := exec.LookPath("etcdctl")
		if err != nil {
			return
		}
		out, err := exec.CommandContext(ctx, bin, append(slices.Clone(call[1:]), "--keys-only", "-w", "json")...).Output()
		if err != nil {
			t.Fatalf("etcdctl %q: %v", call[1:], err)
		}
		var listed struct{ Kvs []struct{ Key []byte } }
		if err := json.Unmarshal(out, &listed); err != nil {
			t.Fatalf("etcdctl %q printed %q: %v", call[1:], out, err)
		}
		got = got[:0]
		for _, kv := range listed.Kvs {
			got = append(got, string(kv.Key))
		}
		if !slices.Equal(got, wantKeys) {
			t.Errorf("etcdctl %q (the real one) reads %q, want %q", call[1:], got, wantKeys)
		}
	}
}

// TestLocks_TheEtcdCommandThatFreesAQueueEntryFreesThatLockOnly: an
// entry named with a NUL is freed by revoking its lease, which deletes
// every key the lease holds. An entry alone on its lease (etcdlock's: a
// lease per Acquire) gets lease revoke, and running it frees that lock
// and nothing else; an entry whose lease holds other keys too (another
// writer's: a session lease, here beside another app's key and another
// lock) gets no command that would delete them, and says why. The
// commands run against the server: with etcdctl when installed, else as
// etcdctl would run them, with the client.
func TestLocks_TheEtcdCommandThatFreesAQueueEntryFreesThatLockOnly(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	e := newEtcd(t)
	grant := func() clientv3.LeaseID {
		g, err := e.Grant(ctx, 3600)
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	own, shared := grant(), grant()
	entry := func(key string, lease clientv3.LeaseID) string {
		return etcdlock.DefaultPrefix + key + "\x00" + fmt.Sprintf("%016x", int64(lease))
	}
	put := func(key, value string, lease clientv3.LeaseID) {
		if _, err := e.Put(ctx, key, value, clientv3.WithLease(lease)); err != nil {
			t.Fatal(err)
		}
	}
	// Held for 2 minutes past a max_hold of 1m: held_too_long.
	put(entry("lock:hold:own", own), hostileValue(time.Hour), own)
	put(entry("lock:hold:shared", shared), hostileValue(time.Hour), shared)
	put(entry("lock:hold:shared-2", shared), hostileValue(time.Hour), shared)
	put("app/session", "another app's key", shared)
	all := func() []string {
		resp, err := e.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, kv := range resp.Kvs {
			if !strings.HasPrefix(string(kv.Key), "/lockgov/fleet/") {
				keys = append(keys, string(kv.Key))
			}
		}
		return keys
	}
	before := all()
	d, err := detectors.NewLocks(etcdStore(t, e), detectors.WithPolicy(loadPolicy(t)),
		detectors.WithNow(func() time.Time { return time.Now().Add(2 * time.Minute) }))
	if err != nil {
		t.Fatal(err)
	}
	found := byKey(detect(t, ctx, d), detectors.KindHeldTooLong)
	for _, key := range []string{"lock:hold:shared", "lock:hold:shared-2"} {
		f, ok := found[key]
		if !ok {
			t.Fatalf("no held_too_long finding on %s", key)
		}
		if i := strings.LastIndex(f.Action, ": etcdctl "); i >= 0 {
			run(t, ctx, e, bashRun(t, f.Action[i+2:]))
			t.Errorf("%s, on a lease that holds other keys: action %q frees it with %q, which left %q of %q",
				key, f.Action, f.Action[i+2:], all(), before)
			return
		}
		if !strings.Contains(f.Action, "lease") {
			t.Errorf("%s: action %q has no command to free it, and no word of why", key, f.Action)
		}
	}
	f, ok := found["lock:hold:own"]
	i := strings.LastIndex(f.Action, ": etcdctl ")
	if !ok || i < 0 {
		t.Fatalf("lock:hold:own, alone on its lease: no command that frees it in %q", f.Action)
	}
	run(t, ctx, e, bashRun(t, f.Action[i+2:]))
	if got, want := all(), slices.DeleteFunc(before, func(k string) bool { return k == entry("lock:hold:own", own) }); !slices.Equal(got, want) {
		t.Errorf("%q left %q, want %q", f.Action[i+2:], got, want)
	}
}

// run runs the one etcdctl call of calls: with etcdctl when installed,
// else as etcdctl runs "lease revoke ID" and "del KEY", with the client.
func run(t *testing.T, ctx context.Context, c *clientv3.Client, calls []cliCall) {
	t.Helper()
	if len(calls) != 1 || calls[0][0] != "etcdctl" {
		t.Fatalf("want one etcdctl call, got %q", calls)
	}
	args := calls[0][1:]
	if bin, err := exec.LookPath("etcdctl"); err == nil {
		if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("etcdctl %q: %v\n%s", args, err, out)
		}
		return
	}
	for len(args) > 0 && strings.HasPrefix(args[0], "--endpoints=") {
		args = args[1:]
	}
	switch {
	case len(args) == 3 && args[0] == "lease" && args[1] == "revoke":
		id, err := strconv.ParseInt(args[2], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Revoke(ctx, clientv3.LeaseID(id)); err != nil {
			t.Fatal(err)
		}
	case len(args) == 2 && args[0] == "del":
		if _, err := c.Delete(ctx, args[1]); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("etcdctl %q: not a command run here", args)
	}
}
