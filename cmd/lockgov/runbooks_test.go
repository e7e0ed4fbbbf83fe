package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/agent"
	"github.com/lockgov/lockgov/internal/demo"
	"github.com/lockgov/lockgov/internal/telemetry"
	"github.com/lockgov/lockgov/internal/testenv"
)

// runAsCLIEnv makes the test binary run as lockgov (see TestMain): the
// runbooks' commands call `lockgov`, and the runbook test puts a `lockgov`
// on their PATH that runs this binary so, instead of building one.
const runAsCLIEnv = "LOCKGOV_TEST_RUN_AS_CLI"

// runbookTools are the programs the runbooks' commands run, with the
// Debian package that has each (scripts/test installs them).
var runbookTools = []struct{ bin, pkg string }{
	{"bash", "bash"}, {"curl", "curl"}, {"jq", "jq"}, {"redis-cli", "redis-tools"}, {"etcdctl", "etcd-client"},
}

// Command names in the runbooks' sh blocks, as commandNames gives them. A
// name in neither list fails the test: a new kind of command must be
// placed in one of them, not skipped unseen.
var (
	// runnableCommands run against the test's agent and stores: lockgov's
	// own, the store and HTTP clients an operator has, and text filters.
	runnableCommands = []string{"curl", "jq", "redis-cli", "etcdctl", "lockgov locks", "lockgov id", "grep", "head", "sort"}
	// hostCommands need what only the operator's environment has (the
	// cluster, the node's clock daemon and journal, the holder process,
	// the service's source tree): their lines are checked by bash -n.
	hostCommands = []string{"kubectl", "chronyc", "timedatectl", "journalctl", "kill", "lockgov vet"}
)

// placeholders are the variables a runbook sets for the operator to fill
// in, which the test sets to its own agent and stores. KEY and STORE take
// the key and store of a finding of the runbook's kind; a runbook whose
// kind the state lacks keeps its own example values for them.
var placeholders = []string{"AGENT", "REDIS", "ETCD", "KEY", "STORE", "TOKEN"}

// stateKinds are the finding kinds the runbook test's state holds (the
// demo's, and those runbookState adds). The test waits for each before it
// runs a command.
var stateKinds = []string{"immortal", "held_too_long", "holder_dead", "deadlock", "skew_degrade", "skew_reject", "workerid_duplicate",
	"eviction_enabled"}

// TestRunbooks_CommandsRunAgainstTheAgentAndStores runs the command lines
// of every runbook's sh blocks (docs/runbooks/Lockgov*.md) with bash against
// a real agent and real stores holding the demo's state plus a lock held
// too long, a lock whose holder died, a degraded clock and a Redis with an
// evicting maxmemory-policy: each exits 0,
// and each line with a jq select prints something, unless it selects a
// finding kind the state has none of (lock_order_inversion). So a runbook
// cannot keep a filter the API no longer answers to (an array where the
// API has an object, a field it renamed, a misspelt kind), a flag lockgov
// does not have, or a store command that fails. redis-cli runs with -e, so
// that an error reply (a misspelt command) fails too.
//
// Commands that need the operator's environment (hostCommands) are checked
// for syntax only. Destructive commands (the agent's DELETE, DEL, lease
// revoke) run, against the test's own stores: the runbooks that have them
// run after the others, so that what they delete is not missed by another
// runbook's check.
func TestRunbooks_CommandsRunAgainstTheAgentAndStores(t *testing.T) {
	t.Parallel()
	tools := runbookToolPaths(t)
	runbooks := readRunbooks(t)
	st := newRunbookState(t)
	shims := runbookShims(t, tools)

	env := []string{"PATH=" + shims + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		// The operator's settings would add stores or change clients.
		if name == "PATH" || slices.Contains(placeholders, name) || strings.HasPrefix(name, "LOCKGOV_") ||
			strings.HasPrefix(name, "ETCDCTL_") || strings.HasPrefix(name, "REDISCLI_") {
			continue
		}
		env = append(env, kv)
	}

	slices.SortStableFunc(runbooks, func(a, b runbook) int {
		switch {
		case a.destructive() == b.destructive():
			return 0
		case a.destructive():
			return 1
		}
		return -1
	})
	for _, rb := range runbooks {
		t.Run(strings.TrimSuffix(filepath.Base(rb.path), ".md"), func(t *testing.T) {
			values := map[string]string{"AGENT": st.agentURL, "REDIS": st.redisURL, "ETCD": st.etcdURL, "TOKEN": st.token}
			if f, ok := st.finding(rb.kind); ok {
				values["KEY"], values["STORE"] = f.Key, f.Store
			} else if rb.kind != "" {
				t.Logf("the state has no %s finding: the commands of %s run, but what they select is not checked", rb.kind, rb.path)
			}
			vars := map[string]string{}
			for _, l := range rb.lines {
				runRunbookLine(t, l, env, vars, values, st.absentKinds())
			}
		})
	}
}

// runbook is one runbook's sh command lines.
type runbook struct {
	path  string
	kind  string // the finding kind the runbook is about ("" if none)
	lines []runbookLine
}

func (rb runbook) destructive() bool {
	return slices.ContainsFunc(rb.lines, func(l runbookLine) bool { return isDestructive(l.text) })
}

// runbookLine is one command line (continuations joined) of an sh block.
type runbookLine struct {
	where string // file:line
	text  string
}

var (
	findingKind = regexp.MustCompile("finding kind `([a-z_]+)`")
	// codeFence is the opening fence of a markdown code block and its
	// language (its closing fence is the next "```" alone).
	codeFence = regexp.MustCompile("(?m)^[ \t]*```([a-z]+)?[ \t]*\n(?s:.*?)\n[ \t]*```[ \t]*$")
	// assignment is a word that sets a variable; assignmentLine a line
	// that only sets one (VAR=value, VAR='...', VAR=$(...)), maybe with a
	// comment.
	assignment     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	assignmentLine = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=(?:\$\(.*\)|'[^']*'|"[^"]*"|[^\s'"]*)\s*(?:#.*)?$`)
	shellVar       = regexp.MustCompile(`\$\{?([A-Z][A-Z0-9_]*)`)
	jqString       = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	// curlDelete and etcdctlWrite are the arguments of destructive curl
	// and etcdctl commands (isDestructive).
	curlDelete   = regexp.MustCompile(`(-X|--request) '?"?DELETE`)
	etcdctlWrite = regexp.MustCompile(`(^|\s)(del|put|lease revoke)(\s|$)`)
)

func readRunbooks(t *testing.T) []runbook {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "docs", "runbooks", "Lockgov*.md"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no runbooks under docs/runbooks: %v", err)
	}
	var out []runbook
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, filepath.Join("..", "..")+string(filepath.Separator)))
		rb := runbook{path: rel, lines: shLines(rel, string(data))}
		// Commands in a block of another language would not be run.
		for _, m := range codeFence.FindAllStringSubmatch(string(data), -1) {
			if m[1] != "sh" && m[1] != "promql" {
				t.Errorf("%s: a ```%s block: runbook code blocks are sh (run here) or promql (checked by ./alerts)", rel, m[1])
			}
		}
		if m := findingKind.FindStringSubmatch(string(data)); m != nil {
			rb.kind = m[1]
		}
		checkRunbookVariables(t, rb)
		out = append(out, rb)
	}
	return out
}

// shLines returns the command lines of the ```sh blocks of a markdown
// text: continuation lines joined, blank lines and comment lines left out.
func shLines(path, text string) []runbookLine {
	var out []runbookLine
	in := false
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && strings.HasPrefix(trimmed, "```sh"):
			in = true
			continue
		case in && trimmed == "```":
			in = false
			continue
		case !in:
			continue
		}
		if cur.Len() == 0 {
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			start = i + 1
		}
		if c, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(c + " ")
			continue
		}
		cur.WriteString(trimmed)
		out = append(out, runbookLine{where: fmt.Sprintf("%s:%d", path, start), text: cur.String()})
		cur.Reset()
	}
	return out
}

// checkRunbookVariables holds that a runbook sets every variable its
// commands use before they use it: an operator who pastes its commands in
// order has each one defined.
func checkRunbookVariables(t *testing.T, rb runbook) {
	t.Helper()
	set := map[string]bool{}
	for _, l := range rb.lines {
		for _, m := range shellVar.FindAllStringSubmatch(l.text, -1) {
			if !set[m[1]] {
				t.Errorf("%s: $%s is used but not set before in %s: add a line %s=... (what the operator fills in)", l.where, m[1], rb.path, m[1])
			}
		}
		if m := assignmentLine.FindStringSubmatch(l.text); m != nil {
			set[m[1]] = true
		}
	}
}

// commandNames returns the command names of a shell line (shellCommands):
// the first word of each, with "lockgov" followed by its subcommand.
func commandNames(line string) []string {
	var names []string
	for _, words := range shellCommands(line) {
		name := words[0]
		if name == "lockgov" && len(words) > 1 {
			name += " " + words[1]
		}
		names = append(names, name)
	}
	return names
}

// shellCommands returns the simple commands of a shell line, each as its
// words (quotes kept) without the variable assignments before it: the
// commands at the start, after |, ||, &&, ; and inside $( ). Quotes are
// honoured ('...' and "..." never split), a # starting a word begins a
// comment; a $( inside double quotes is not looked into.
func shellCommands(line string) [][]string {
	var cmds [][]string
	var words []string // words of the current simple command
	var word strings.Builder
	inWord := false
	flushWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	flushCommand := func() {
		flushWord()
		for len(words) > 0 && assignment.MatchString(words[0]) {
			words = words[1:]
		}
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				j = len(line) - i - 1
			}
			word.WriteString(line[i:min(i+j+2, len(line))])
			inWord = true
			i += j + 1
		case c == '"':
			j := i + 1
			for j < len(line) && line[j] != '"' {
				if line[j] == '\\' {
					j++
				}
				j++
			}
			word.WriteString(line[i:min(j+1, len(line))])
			inWord = true
			i = j
		case c == '\\' && i+1 < len(line):
			word.WriteString(line[i : i+2])
			inWord = true
			i++
		case c == '#' && !inWord:
			flushCommand()
			return cmds
		case c == ' ' || c == '\t':
			flushWord()
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			// The assignment before it is not a command; the command
			// inside is.
			flushWord()
			words = nil
			i++
		case c == '|' || c == ';' || c == '&' || c == ')':
			flushCommand()
			if i+1 < len(line) && (line[i+1] == '|' || line[i+1] == '&') {
				i++
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	flushCommand()
	return cmds
}

// isDestructive reports whether a line changes a store: the agent's
// DELETE, a redis-cli write, an etcdctl delete, put or lease revocation.
func isDestructive(line string) bool {
	for _, words := range shellCommands(line) {
		args := strings.Join(words[1:], " ")
		switch words[0] {
		case "curl":
			if curlDelete.MatchString(args) {
				return true
			}
		case "redis-cli":
			for _, w := range words[1:] {
				switch strings.ToUpper(strings.Trim(w, `'"`)) {
				case "DEL", "UNLINK", "PEXPIRE", "EXPIRE", "PERSIST", "SET", "FLUSHALL", "FLUSHDB":
					return true
				}
			}
		case "etcdctl":
			if etcdctlWrite.MatchString(args) {
				return true
			}
		}
	}
	return false
}

// runRunbookLine runs one line with bash: an assignment of a placeholder
// takes the test's value, any other assignment is run and its value kept
// for the lines after it, and a command must exit 0 and, when it has a jq
// select of what the state holds, print something.
func runRunbookLine(t *testing.T, l runbookLine, env []string, vars, values map[string]string, absentKinds []string) {
	t.Helper()
	host := false
	for _, n := range commandNames(l.text) {
		switch {
		case slices.Contains(hostCommands, n):
			host = true
		case !slices.Contains(runnableCommands, n):
			t.Errorf("%s: command %q is in neither runnableCommands nor hostCommands of cmd/lockgov/runbooks_test.go: place it\n\t%s", l.where, n, l.text)
			return
		}
	}
	lineEnv := slices.Clone(env)
	for k, v := range vars {
		lineEnv = append(lineEnv, k+"="+v)
	}
	if host {
		if out, err := runBash(t, lineEnv, "-n", "-c", l.text); err != nil {
			t.Errorf("%s: bash -n: %v\n\t%s\n%s", l.where, err, l.text, out)
		}
		return
	}
	script, assigned := l.text, ""
	if m := assignmentLine.FindStringSubmatch(l.text); m != nil {
		assigned = m[1]
		if v, ok := values[assigned]; ok {
			vars[assigned] = v
			return
		}
		script += "\nprintf '%s' \"$" + assigned + "\"" // its value is the output
	}
	mustSelect := strings.Contains(l.text, "select(") && !isDestructive(l.text) &&
		!slices.ContainsFunc(selectLiterals(l.text), func(s string) bool { return slices.Contains(absentKinds, s) })
	// A select that finds nothing is tried again for a while: the state
	// comes from live processes (heartbeats renewed every second), which a
	// loaded machine may hold up past a beat's TTL for a moment. A filter
	// that does not match the API never selects anything.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := runBash(t, lineEnv, "-e", "-o", "pipefail", "-c", script)
		switch {
		case err != nil:
			t.Errorf("%s: %v\n\t%s\n%s", l.where, err, l.text, out)
			return
		case mustSelect && strings.TrimSpace(out.stdout) == "" && time.Now().Before(deadline):
			time.Sleep(200 * time.Millisecond) // polling the state, not a synchronisation
			continue
		case mustSelect && strings.TrimSpace(out.stdout) == "":
			t.Errorf("%s: selects nothing from a state that has what it selects: the filter does not match what lockgov answers\n\t%s\nstderr: %s",
				l.where, l.text, out.stderr)
		}
		if assigned != "" {
			vars[assigned] = out.stdout
		}
		return
	}
}

// selectLiterals returns the string literals of the jq programs (the
// single-quoted words) of a line.
func selectLiterals(line string) []string {
	var out []string
	parts := strings.Split(line, "'")
	for i := 1; i < len(parts); i += 2 { // the parts inside single quotes
		for _, m := range jqString.FindAllStringSubmatch(parts[i], -1) {
			out = append(out, m[1])
		}
	}
	return out
}

type bashOutput struct{ stdout, stderr string }

func (o bashOutput) String() string {
	return fmt.Sprintf("stdout:\n%s\nstderr:\n%s", o.stdout, o.stderr)
}

func runBash(t *testing.T, env []string, args ...string) (bashOutput, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return bashOutput{stdout.String(), stderr.String()}, err
}

// runbookToolPaths returns the path of each of runbookTools. A missing tool
// skips the test where it may (a developer's machine) and fails it under CI,
// naming the package: there scripts/test installs it.
func runbookToolPaths(t *testing.T) map[string]string {
	t.Helper()
	paths := map[string]string{}
	var missing []string
	for _, tool := range runbookTools {
		p, err := exec.LookPath(tool.bin)
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", tool.bin, tool.pkg))
			continue
		}
		paths[tool.bin] = p
	}
	if len(missing) > 0 {
		msg := "the runbooks' commands need " + strings.Join(missing, ", ") + ": scripts/test installs them"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return paths
}

// runbookShims returns a directory with `lockgov` (this test binary, run
// as the CLI) and `redis-cli` (the real one with -e: exit 1 on an error
// reply, which redis-cli otherwise prints with exit 0).
func runbookShims(t *testing.T, tools map[string]string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, script := range map[string]string{
		// Under -race a binary sleeps a second as it exits (GORACE's
		// atexit_sleep_ms) unless told not to.
		"lockgov":   fmt.Sprintf("#!/bin/sh\n%s=1\nGORACE=\"${GORACE:+$GORACE }atexit_sleep_ms=0\"\nexport %[1]s GORACE\nexec '%s' \"$@\"\n", runAsCLIEnv, self),
		"redis-cli": fmt.Sprintf("#!/bin/sh\nexec '%s' -e \"$@\"\n", tools["redis-cli"]),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runbookState is a real agent on a real Redis and etcd (testenv) with the
// demo's workload running on them, plus what the demo does not make: a
// lock held longer than its pattern's max_hold, a lock whose holder's
// heartbeats stopped, and an instance whose clock is in the degrade tier.
type runbookState struct {
	agentURL, redisURL, etcdURL, token string
	findings                           []findingJSON
}

type findingJSON struct {
	Kind  string `json:"kind"`
	Key   string `json:"key"`
	Store string `json:"store"`
}

// absentKinds are the finding kinds the state has none of: a select of
// one of them may select nothing.
func (s *runbookState) absentKinds() []string {
	var out []string
	for _, k := range telemetry.Findings.Values["kind"] {
		if _, ok := s.finding(k); !ok {
			out = append(out, k)
		}
	}
	return out
}

func (s *runbookState) finding(kind string) (findingJSON, bool) {
	for _, f := range s.findings {
		if f.Kind == kind {
			return f, true
		}
	}
	return findingJSON{}, false
}

const runbookPolicy = `
patterns:
  - pattern: "lock:export:{id}"
    max_hold: 1s
`

func newRunbookState(t *testing.T) *runbookState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	r, e := testenv.NewRedis(t), testenv.NewEtcd(t)
	rdb, cli := r.Client(t), e.Client(t)
	stop, err := demo.StartWorkload(ctx, cli, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	// held_too_long: a live lock of lock:export:{id}, whose max_hold is 1s.
	exporter, err := redislock.New(rdb, redislock.WithService("exporter"), redislock.WithInstance("exporter-1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exporter.Close() })
	lease, err := exporter.Acquire(ctx, "lock:export:9", instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })

	// holder_dead: a lock of pod-dead (in redislock's framing, "<token>
	// <fence> <json>"), a process on another host, whose heartbeat the
	// agent sees and then sees gone.
	now := time.Now()
	dead := &fleet.Heartbeat{Instance: "pod-dead", Service: "orders", Host: "host-pod-dead", PID: 777, StartedAt: now, SentAt: now, Interval: time.Second}
	deadValue := fmt.Sprintf(`tok777 5 {"service":"orders","instance":"pod-dead","host":"host-pod-dead","pid":777,"v":"test","ttl_ms":600000,"acquired_at_ms":%d,"fence":5}`, now.UnixMilli())
	// skew_degrade: an instance 300 ms ahead of its store, in the degrade tier.
	drift := 300 * time.Millisecond
	drifting := &fleet.Heartbeat{Instance: "billing-drifting", Service: "billing", Host: "host-drifting", PID: 778,
		StartedAt: now, SentAt: now.Add(drift), Interval: time.Minute, Tier: "degrade",
		Clock: &fleet.ClockSample{Offset: drift, RTT: time.Millisecond, MeasuredAt: now.Add(drift), Source: fleet.ClockSourceStore}}
	for _, hb := range []*fleet.Heartbeat{dead, drifting} {
		b, err := fleet.Encode(hb)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, fleet.RedisKey(hb.Instance), b, 10*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Set(ctx, "lock:order:7", deadValue, 10*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	// eviction_enabled: a limit far above what the state uses, with
	// ElastiCache's default policy: nothing is evicted.
	for _, kv := range [][2]string{{"maxmemory", "1gb"}, {"maxmemory-policy", "volatile-lru"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}

	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(runbookPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	st := &runbookState{redisURL: "redis://" + r.Addr(), etcdURL: e.Endpoint(), token: "runbook-test-token"}
	// The demo's interval. Each detector of a scan is bounded by the scan
	// timeout (at most, and by default, the interval): at 300 ms, scans on
	// a loaded 2-core machine (the race detector, the demo's workload,
	// other packages' tests) ran out of time for seconds on end, and
	// (when the detectors still ran one after another under one timeout)
	// the detectors after the lock scans (clock, deadlock, WorkerIDs)
	// reported nothing for longer than a select's retries.
	// Scan errors go to the test's log when it fails.
	var scanLog syncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the agent's log:\n%s", scanLog.String())
		}
	})
	a, err := agent.Start(ctx, agent.Config{
		Redis: []string{st.redisURL}, Etcd: e.Endpoints(), Policy: policyFile,
		Listen: "127.0.0.1:0", Interval: 2 * time.Second, ID: "runbook-test",
		RemediationToken: st.token, Logger: slog.New(slog.NewTextHandler(&scanLog, &slog.HandlerOptions{Level: slog.LevelWarn})), Stdout: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	// The runbooks' AGENT has no trailing slash: $AGENT/api/v1/... .
	st.agentURL = strings.TrimSuffix(a.URL(), "/")

	// The agent must see pod-dead alive in a scan before its heartbeat
	// goes: a scan that begins after one listed it (its detectors ran
	// before it read the instances that scan listed).
	var listedAt string
	pollAgent(t, "a scan after the one that listed pod-dead", func() bool {
		var doc struct {
			Instances []struct{ Instance string } `json:"instances"`
			ScannedAt string                      `json:"scanned_at"`
		}
		getAgentJSON(t, st.agentURL+"/api/v1/instances", &doc)
		switch {
		case listedAt != "":
			return doc.ScannedAt != listedAt
		case slices.ContainsFunc(doc.Instances, func(i struct{ Instance string }) bool { return i.Instance == "pod-dead" }):
			listedAt = doc.ScannedAt
		}
		return false
	})
	if err := rdb.Del(ctx, fleet.RedisKey(dead.Instance)).Err(); err != nil {
		t.Fatal(err)
	}

	pollAgent(t, "the agent's findings of each kind in stateKinds", func() bool {
		var doc struct {
			Findings []findingJSON `json:"findings"`
			Leader   bool          `json:"leader"`
		}
		getAgentJSON(t, st.agentURL+"/api/v1/findings", &doc)
		for _, k := range stateKinds {
			if !slices.ContainsFunc(doc.Findings, func(f findingJSON) bool { return f.Kind == k }) {
				return false
			}
		}
		st.findings = doc.Findings
		return true
	})
	return st
}

// pollAgent polls cond every 50 ms until it holds, for up to a minute (a
// loaded 2-core machine under the race detector).
func pollAgent(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond) // polling the agent, not a synchronisation
	}
}

func getAgent(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, b)
	}
	return string(b)
}

func getAgentJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(getAgent(t, url)), v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestShellCommands_FindEveryCommandOfALineAndWhatWrites holds the
// classifier the runbook test relies on: a command hidden in a pipe, after
// ;, && or inside $( ) is seen, quotes (a jq program's |) do not split, and
// a line that writes to a store is told from one whose jq says del.
func TestShellCommands_FindEveryCommandOfALineAndWhatWrites(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`curl -fsS "$AGENT/api/v1/findings" | jq '.findings[] | select(.kind == "immortal")'`, []string{"curl", "jq"}},
		{`chronyc tracking ; chronyc sources -v`, []string{"chronyc", "chronyc"}},
		{`VERSION=$(curl -fsS "$AGENT/x" | jq -r '.a | .b') && kubectl get pods`, []string{"curl", "jq", "kubectl"}},
		{`lockgov locks show "$KEY" --redis "$REDIS"   # holder | pid`, []string{"lockgov locks"}},
		{`LOCKGOV_REDIS=x lockgov vet ./... || rm -rf /`, []string{"lockgov vet", "rm"}},
		{`KEY='lock:order:42'`, nil},
		{`redis-cli -u "$REDIS" INFO stats | grep evicted_keys`, []string{"redis-cli", "grep"}},
	} {
		if got := commandNames(tc.line); !slices.Equal(got, tc.want) {
			t.Errorf("commandNames(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
	for line, want := range map[string]bool{
		`curl -sS --fail-with-body -X DELETE -H "If-Match: \"$V\"" "$AGENT/api/v1/locks"`: true,
		`redis-cli -u "$REDIS" DEL "$KEY"`:                                                true,
		`redis-cli -u "$REDIS" pexpire "$KEY" 30000`:                                      true,
		`etcdctl --endpoints="$ETCD" lease revoke 694d77aa8f6e2a11`:                       true,
		`redis-cli -u "$REDIS" GET "$KEY" | jq 'del(.owner)'`:                             false,
		`etcdctl --endpoints="$ETCD" get "$KEY" --print-value-only | jq 'del(.owner)'`:    false,
		`curl -fsS "$AGENT/api/v1/findings" | jq '.findings[]'   # not -X DELETE`:         false,
	} {
		if got := isDestructive(line); got != want {
			t.Errorf("isDestructive(%q) = %v, want %v", line, got, want)
		}
	}
}
