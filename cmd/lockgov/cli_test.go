package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/lockversion"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return o.String(), e.String(), code
}

func TestCLI_VersionHelpAndCompletion(t *testing.T) {
	out, _, code := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "lockgov ") {
		t.Errorf("version: %d %q", code, out)
	}
	out, _, code = runCLI(t, "--help")
	if code != 0 {
		t.Errorf("--help: exit %d", code)
	}
	for _, c := range []string{"agent", "demo", "generate", "id", "locks", "vet", "version", "completion"} {
		if !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("--help does not list %s:\n%s", c, out)
		}
	}
	for _, args := range [][]string{{"agent", "--help"}, {"locks", "ls", "--help"}, {"locks", "show", "--help"}, {"id", "gen", "--help"}, {"vet", "--help"}, {"help", "agent"}} {
		if out, errOut, code := runCLI(t, args...); code != 0 || !strings.Contains(strings.ToLower(out), "usage") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	out, _, code = runCLI(t, "completion", "bash")
	if code != 0 || !strings.Contains(out, "bash completion") {
		t.Errorf("completion bash: %d %.80q", code, out)
	}
	if out, _, code = runCLI(t, "completion", "zsh"); code != 0 || !strings.Contains(out, "#compdef lockgov") {
		t.Errorf("completion zsh: %d %.80q", code, out)
	}
	// Without a command: the help on stderr, exit 2 (like a missing argument).
	for _, args := range [][]string{nil, {"locks"}, {"id"}, {"completion"}} {
		out, errOut, code := runCLI(t, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "Usage:") {
			t.Errorf("%v: exit %d, stdout %q, stderr %.60q; want 2 and the help on stderr", args, code, out, errOut)
		}
	}
}

func TestCLI_Agent_BadInputNamesFlagOrFileLineField(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\ninterval: often\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badPolicy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(badPolicy, []byte("defaults:\n  ttl: forever\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	authCfg := filepath.Join(t.TempDir(), "auth.yaml")
	if err := os.WriteFile(authCfg, []byte("redis: rediss://h:1\nredis_auth:\n  tls_ca: /nonexistent/ca.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pwCfg := filepath.Join(t.TempDir(), "pw.yaml")
	if err := os.WriteFile(pwCfg, []byte("redis_auth:\n  password: hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A scan timeout longer than the interval was cut to the interval in
	// silence: it is an error naming both, whether the interval is in the
	// file, given by --interval or the default.
	slowCfg := filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(slowCfg, []byte("interval: 10s\nscan_timeout: 30s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	timeoutCfg := filepath.Join(t.TempDir(), "timeout.yaml")
	if err := os.WriteFile(timeoutCfg, []byte("scan_timeout: 20s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"agent", "--config", cfg}, cfg + `:2: interval: "often" is not a positive duration`},
		{[]string{"agent", "--config", slowCfg}, "scan_timeout 30s (" + slowCfg + ":2) is longer than interval 10s"},
		// --interval overrides the file's interval, and the scan timeout
		// fits it: what is refused is the listen address, checked after.
		{[]string{"agent", "--config", slowCfg, "--interval", "1m", "--listen", "nonsense"}, `--listen "nonsense"`},
		{[]string{"agent", "--config", timeoutCfg}, "scan_timeout 20s (" + timeoutCfg + ":1) is longer than interval 15s"},
		{[]string{"agent", "--config", timeoutCfg, "--interval", "10s"}, "scan_timeout 20s (" + timeoutCfg + ":1) is longer than interval 10s"},
		{[]string{"agent", "--config", authCfg}, "redis_auth.tls_ca: open /nonexistent/ca.pem"},
		{[]string{"agent", "--config", pwCfg}, pwCfg + ":2: redis_auth.password: not read from files: use password_file, or LOCKGOV_REDIS_PASSWORD"},
		{[]string{"agent", "--redis", "redis://:hunter2@h:port"}, `--redis "redis://xxxxx@h:port": malformed URL`},
		{[]string{"agent", "--etcd", "ftp://h:1"}, `--etcd etcd`},
		{[]string{"agent", "--interval", "-1s"}, "--interval -1s: want > 0"},
		{[]string{"agent", "--policy", badPolicy}, badPolicy + ":2: defaults.ttl"},
		{[]string{"locks", "ls", "--redis", "mysql://h:1"}, `--redis mysql://h:1: scheme "mysql"`},
		{[]string{"locks", "ls", "-o", "yaml", "--redis", "redis://h:1"}, `-o "yaml": want table or json`},
		{[]string{"locks", "ls"}, "no store: give --redis URL or --etcd ENDPOINTS"},
	} {
		_, errOut, code := runCLI(t, tc.args...)
		if tc.want == "--etcd etcd" {
			tc.want = `--etcd ftp://h:1: scheme "ftp"`
		}
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
		if strings.Contains(errOut, "hunter2") {
			t.Errorf("%v: the error repeats the password: %q", tc.args, errOut)
		}
	}
}

func TestCLI_LocksLsAndShow_HolderPatternTTLFenceAndNoToken(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := redislock.New(c, redislock.WithService("billing"), redislock.WithInstance("pod-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, "lock:order:42", instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	raw, err := c.Get(ctx, "lock:order:42").Result()
	if err != nil {
		t.Fatal(err)
	}
	token, _, _ := strings.Cut(raw, " ")
	if err := c.Set(ctx, "lock:legacy", "some-other-library", 0).Err(); err != nil {
		t.Fatal(err)
	}

	url := "redis://" + r.Addr()
	out, errOut, code := runCLI(t, "locks", "ls", "--redis", url)
	if code != 0 {
		t.Fatalf("locks ls: %d %s", code, errOut)
	}
	if !strings.Contains(out, "lock:order:42") || !strings.Contains(out, "billing@pod-1") || !strings.Contains(out, "foreign") || !strings.Contains(out, "none (immortal)") {
		t.Errorf("locks ls:\n%s", out)
	}
	out, _, code = runCLI(t, "locks", "ls", "--redis", url, "-o", "json", "--pattern", "lock:order:*")
	if code != 0 {
		t.Fatalf("locks ls -o json: %d", code)
	}
	var got struct {
		Key        string  `json:"key"`
		KeyPattern string  `json:"key_pattern"`
		TTLSeconds float64 `json:"ttl_seconds"`
		Fence      uint64  `json:"fence"`
		Holder     struct{ Service string }
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &got) != nil {
		t.Fatalf("locks ls -o json: %q", out)
	}
	if got.Holder.Service != "billing" || got.TTLSeconds <= 0 || got.Fence != lease.Fence() || got.KeyPattern == "" {
		t.Errorf("json: %+v (fence want %d)", got, lease.Fence())
	}
	out, _, code = runCLI(t, "locks", "show", "lock:order:42", "--redis", url)
	if code != 0 || !strings.Contains(out, "billing@pod-1") {
		t.Errorf("locks show: %d %q", code, out)
	}
	if _, errOut, code := runCLI(t, "locks", "show", "lock:none", "--redis", url); code != 1 || !strings.Contains(errOut, `no lock on "lock:none"`) {
		t.Errorf("locks show of a missing key: %d %q", code, errOut)
	}
	for _, o := range []string{out} {
		if strings.Contains(o, token) {
			t.Errorf("the owner token is in the output: %q", o)
		}
	}

	// etcd, through the environment.
	e := testenv.NewEtcd(t)
	ec := testenv.NewEtcdClient(t, e.Endpoints()...)
	el, err := etcdlock.New(ec)
	if err != nil {
		t.Fatal(err)
	}
	elease, err := el.Acquire(ctx, "lock:stock:7", instrument.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer elease.Release(ctx)
	t.Setenv("LOCKGOV_ETCD", e.Endpoint())
	out, errOut, code = runCLI(t, "locks", "ls", "-o", "json")
	if code != 0 || !strings.Contains(out, `"key":"lock:stock:7"`) {
		t.Errorf("locks ls with LOCKGOV_ETCD: %d %q %q", code, out, errOut)
	}
}

// TestCLI_Agent_PrintsTheConsoleURLAndStopsOnSignal runs the binary as an
// operator would.
func TestCLI_Agent_PrintsTheConsoleURLAndStopsOnSignal(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	bin := buildLockgov(t)
	cmd := exec.Command(bin, "agent", "--listen", "127.0.0.1:0", "--interval", "200ms")
	cmd.Env = append(os.Environ(), "LOCKGOV_REDIS=redis://"+r.Addr(), "LOCKGOV_REMEDIATION_TOKEN=tok-9f8e7d")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	firstLine := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case firstLine <- sc.Text():
			default:
			}
		}
	}()
	exited := make(chan error, 1)
	var url string
	select {
	case url = <-firstLine:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("no console URL within a minute; stderr:\n%s", stderr.String())
	}
	go func() { exited <- cmd.Wait() }()
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/") || strings.HasSuffix(url, ":0/") {
		t.Errorf("console URL line %q", url)
	}
	resp, err := http.Get(url + "readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/readyz = %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodDelete, url+"api/v1/locks?key=lock:x", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("remediation without the token: %d, want 401", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent exit after SIGINT: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("agent did not stop within a minute of SIGINT")
	}
	if strings.Contains(stderr.String(), "tok-9f8e7d") {
		t.Errorf("the remediation token is in the log:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "remediation refused") {
		t.Errorf("the refused remediation is not logged:\n%s", stderr.String())
	}
}

// syncBuffer is a bytes.Buffer the process's stderr copier and the test
// may use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCLI_LocksShow_AnEmptyKeyIsAUsageError: `locks show ""` names no
// key; on etcd the empty key is the whole lock prefix, which showed
// another key's lock with exit 0. It is a usage error saying so.
func TestCLI_LocksShow_AnEmptyKeyIsAUsageError(t *testing.T) {
	e := testenv.NewEtcd(t)
	l, err := etcdlock.New(e.Client(t), etcdlock.WithService("billing"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := l.Acquire(ctx, "lock:order:42", instrument.WithTTL(30*time.Second), instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	out, errOut, code := runCLI(t, "locks", "show", "", "--etcd", e.Endpoint())
	if code != 2 || !strings.Contains(errOut, "KEY is empty") || strings.Contains(out, "lock:order:42") {
		t.Errorf("locks show '': exit %d, stdout %q, stderr %q; want exit 2 and a usage error naming the empty KEY", code, out, errOut)
	}
}

// TestCLI_LocksShow_AStoreDownIsNamedOnce: `locks show` against a Redis
// that is down fails with an error naming the store once (it was prefixed
// twice: "redis://h:p: redis://h:p: ...").
func TestCLI_LocksShow_AStoreDownIsNamedOnce(t *testing.T) {
	r := testenv.NewRedis(t)
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + r.Addr()
	_, errOut, code := runCLI(t, "locks", "show", "lock:x", "--timeout", "1s", "--redis", url)
	if code != 1 || strings.Count(errOut, url) != 1 {
		t.Errorf("locks show with the store down: exit %d, stderr %q; want exit 1 and the store named once", code, errOut)
	}
}

// tableRow returns the line of a locks table whose first cell is key as
// the table shows it.
func tableRow(t *testing.T, out, key string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, key+"  ") {
			return line
		}
	}
	t.Fatalf("no row for %s in:\n%s", key, out)
	return ""
}

// TestCLI_LocksLsAndShow_EscapeWhatATerminalWouldNotShowAndShowTheVersion:
// a key is bytes, and another application's key under a scanned pattern
// (or a holder's service name in a crafted value) may hold a newline that
// prints a row of its own, an escape sequence that rewrites the terminal,
// a tab that shifts the columns, or bytes that are not UTF-8. The table
// prints such a cell as a POSIX shell's $'...' with \xNN escapes (the
// agent console's and the findings' actions' form), which `locks show`
// takes back through the shell; it prints every other key as it is, and
// says on stderr that values were escaped. Each row shows the lock's
// version, the If-Match of the agent's DELETE.
func TestCLI_LocksLsAndShow_EscapeWhatATerminalWouldNotShowAndShowTheVersion(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := redislock.New(c, redislock.WithService("billing"), redislock.WithInstance("pod-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, "lock:order:42", instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	raw, err := c.Get(ctx, "lock:order:42").Result()
	if err != nil {
		t.Fatal(err)
	}
	const spoof = "lock:spoof\nlock:order:7  billing@pod-1 pid 1  1s  59s  7"
	for key, value := range map[string]string{
		"lock:\xff\xfe":                 "foreign-1",
		spoof:                           "x",
		"lock:esc\x1b[2J\x1b]0;pwned\a": "x",
		"lock:tab\there":                "x",
		"lock:café":                     "x",
		"lock:crafted":                  `tok 7 {"service":"evil\nbilling","pid":1}`,
		`$'lock:\xff'`:                  "x",
	} {
		if err := c.Set(ctx, key, value, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	url := "redis://" + r.Addr()
	out, errOut, code := runCLI(t, "locks", "ls", "--redis", url, "--pattern", "lock:*", "--pattern", "$*")
	if code != 0 {
		t.Fatalf("locks ls: %d %s", code, errOut)
	}
	for _, c := range out {
		if c != '\n' && !unicode.IsPrint(c) {
			t.Fatalf("locks ls printed %q, which a terminal does not show as itself:\n%s", c, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 9 {
		t.Errorf("locks ls printed %d lines, want 9 (a header and 8 locks): a key printed a row of its own:\n%s", n, out)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if header[len(header)-1] != "VERSION" {
		t.Errorf("header %q: want a VERSION column last", header)
	}
	if row := tableRow(t, out, "lock:order:42"); !strings.HasSuffix(row, "  "+lockversion.Redis(raw)) {
		t.Errorf("row of lock:order:42 %q: want its version %s last", row, lockversion.Redis(raw))
	}
	tableRow(t, out, `$'lock:\xff\xfe'`)
	tableRow(t, out, `$'lock:spoof\x0alock:order:7  billing@pod-1 pid 1  1s  59s  7'`)
	tableRow(t, out, `$'lock:esc\x1b[2J\x1b]0;pwned\x07'`)
	tableRow(t, out, `$'lock:tab\x09here'`)
	tableRow(t, out, "lock:café")
	tableRow(t, out, `$'$\'lock:\\xff\''`) // a key that reads as an escaped one is escaped too
	if row := tableRow(t, out, "lock:crafted"); !strings.Contains(row, `$'evil\x0abilling pid 1'`) {
		t.Errorf("row of lock:crafted %q: want its holder escaped", row)
	}
	if !strings.Contains(errOut, "escaped") || !strings.Contains(errOut, `\xNN`) {
		t.Errorf("locks ls stderr %q: want a note that values are shown escaped", errOut)
	}

	// The key as the shell passes $'lock:\xff\xfe': its bytes.
	out, errOut, code = runCLI(t, "locks", "show", "lock:\xff\xfe", "--redis", url)
	if code != 0 {
		t.Fatalf("locks show of a key that is not UTF-8: %d %s", code, errOut)
	}
	if row := tableRow(t, out, `$'lock:\xff\xfe'`); !strings.HasSuffix(row, "  "+lockversion.Redis("foreign-1")) {
		t.Errorf("locks show row %q: want the escaped key and its version", row)
	}
	if !strings.Contains(errOut, "escaped") {
		t.Errorf("locks show stderr %q: want a note that the key is shown escaped", errOut)
	}
	out, errOut, code = runCLI(t, "locks", "show", "lock:order:42", "--redis", url)
	if code != 0 || !strings.HasSuffix(tableRow(t, out, "lock:order:42"), "  "+lockversion.Redis(raw)) || errOut != "" {
		t.Errorf("locks show lock:order:42: exit %d, stdout %q, stderr %q; want its row with its version, nothing on stderr", code, out, errOut)
	}

	// etcd: the version is the holder entry's revision, as the API gives it.
	e := testenv.NewEtcd(t)
	el, err := etcdlock.New(testenv.NewEtcdClient(t, e.Endpoints()...))
	if err != nil {
		t.Fatal(err)
	}
	elease, err := el.Acquire(ctx, "lock:stock:7", instrument.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer elease.Release(ctx)
	out, _, code = runCLI(t, "locks", "show", "lock:stock:7", "--etcd", e.Endpoint(), "-o", "json")
	var got struct{ Version string }
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Version == "" {
		t.Fatalf("locks show -o json on etcd: %d %q", code, out)
	}
	out, _, code = runCLI(t, "locks", "show", "lock:stock:7", "--etcd", e.Endpoint())
	if row := tableRow(t, out, "lock:stock:7"); code != 0 || !strings.HasSuffix(row, "  "+got.Version) {
		t.Errorf("locks show on etcd: row %q, want the version %s last", row, got.Version)
	}
}

// TestCLI_BadUsageExitsTwo holds the README's exit status ("2 bad usage")
// for the mistakes cobra's argument checks and the commands' own flag
// checks catch: an argument a command does not take, a missing KEY, a
// negative or zero duration, a console address without a port. Each names
// the problem on stderr and exits 2, not 1 (which a script reads as "the
// store failed").
func TestCLI_BadUsageExitsTwo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"agent", "extra"}, `unknown command "extra" for "lockgov agent"`},
		{[]string{"demo", "extra"}, `unknown command "extra" for "lockgov demo"`},
		{[]string{"generate", "extra", "--out", t.TempDir()}, `unknown command "extra" for "lockgov generate"`},
		{[]string{"version", "extra"}, `unknown command "extra" for "lockgov version"`},
		{[]string{"locks", "ls", "extra", "--redis", "redis://127.0.0.1:1"}, `unknown command "extra" for "lockgov locks ls"`},
		{[]string{"locks", "show", "--redis", "redis://127.0.0.1:1"}, "accepts 1 arg(s), received 0"},
		{[]string{"locks", "show", "a", "b", "--redis", "redis://127.0.0.1:1"}, "accepts 1 arg(s), received 2"},
		{[]string{"locks", "ls", "--timeout", "0", "--redis", "redis://127.0.0.1:1"}, "--timeout 0s: want > 0"},
		{[]string{"locks", "ls", "--timeout", "-1s", "--redis", "redis://127.0.0.1:1"}, "--timeout -1s: want > 0"},
		{[]string{"demo", "--duration", "-1s"}, "--duration -1s: want >= 0"},
		{[]string{"demo", "--listen", "nonsense", "--duration", "1s"}, `--listen "nonsense"`},
		{[]string{"completion", "bsh"}, `unknown command "bsh"`},
		{[]string{"completion", "bash", "extra"}, `unknown command "extra" for "lockgov completion bash"`},
	} {
		out, errOut, code := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2, nothing on stdout and %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

// TestCLI_Agent_ConfigFileErrorsNameFileLineAndField: what the README
// promises for agent.yaml ("errors read agent.yaml:3: interval: ...") holds
// for every field the parser accepts, with exit 2: an empty SCAN pattern
// was reported only when the agent started ("patterns: an empty pattern",
// exit 1, no file or line), and a listen address without a port was named
// as the --listen flag the user never gave.
func TestCLI_Agent_ConfigFileErrorsNameFileLineAndField(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"redis: redis://127.0.0.1:1\npatterns: ['lock:*', '']\n", ":2: patterns: an empty pattern"},
		{"redis: redis://127.0.0.1:1\nlisten: nonsense\n", `:2: listen: "nonsense": `},
	} {
		cfg := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(cfg, []byte(tc.src), 0o600); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := runCLI(t, "agent", "--config", cfg)
		if code != 2 || !strings.Contains(errOut, cfg+tc.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.src, code, out, errOut, cfg+tc.want)
		}
	}
}
