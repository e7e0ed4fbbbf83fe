package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/agent"
	"github.com/lockgov/lockgov/internal/shellquote"
	"github.com/lockgov/lockgov/internal/testenv"
)

// invisible reports whether r is a code point a terminal renders as
// nothing (Unicode's Default_Ignorable_Code_Point: format characters,
// variation selectors, fillers), or that is not printable at all.
func invisible(r rune) bool {
	return !unicode.IsPrint(r) || unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}

// TestCLI_LocksLs_NoKeyOrHolderReachesTheTerminalAsSomethingElse attacks
// the table's escaping with what a terminal would not show as itself:
// escape sequences (ESC [ and a C1 CSI, as UTF-8 and as a raw byte),
// bidirectional overrides and isolates, zero-width characters, line and
// paragraph separators, a no-break space, tabs, invisible code points that
// unicode.IsPrint still calls printable (a combining grapheme joiner,
// variation selectors, Hangul fillers), a long key ending in a newline,
// and bytes that are not UTF-8 (overlong, a surrogate, a truncated
// sequence), in keys and in a holder's service and instance. Each key is
// one row whose KEY cell is its $'...' form, which bash reads back to the
// key's bytes; nothing printed is invisible or a control; and -o json is
// one valid JSON object per lock whose key (key_base64 where it is not
// UTF-8) is the key's exact bytes.
func TestCLI_LocksLs_NoKeyOrHolderReachesTheTerminalAsSomethingElse(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash not found:", err)
	}
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := []string{
		"lock:ansi\x1b[31mred\x1b[0m", "lock:c1\u009b31m\u0085", "lock:c1raw\x9b31m\x85", "lock:bidi\u202egnp.exe",
		"lock:iso\u2066x\u2067y\u2068z\u2069", "lock:zw\u200bx\ufeff", "lock:ls\u2028ps\u2029", "lock:nbsp\u00a0x",
		"lock:tab\tx", "lock:cgj\u034f", "lock:vs\ufe0f", "lock:fill\u3164", "lock:hangul\u115f\u1160\uffa0",
		"lock:vs17\U000e0100", "lock:tag\U000e0041", "lock:long" + strings.Repeat("x", 5000) + "\n",
		"lock:bad\xc3\x28", "lock:overlong\xc0\xaf", "lock:surrogate\xed\xa0\x80",
	}
	for _, k := range keys {
		if err := c.Set(ctx, k, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	holders := map[string]string{
		"lock:h:1": `tok 7 {"service":"svc\u202e1","instance":"pod\u001b[2J","pid":1}`,
		"lock:h:2": `tok 7 {"service":"svc\u3164","instance":"pod\u009b2J","pid":1}`,
	}
	for k, v := range holders {
		if err := c.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	url := "redis://" + r.Addr()
	out, errOut, code := runCLI(t, "locks", "ls", "--redis", url)
	if code != 0 {
		t.Fatalf("locks ls: %d %s", code, errOut)
	}
	if n := strings.Count(out, "\n"); n != 1+len(keys)+len(holders) {
		t.Errorf("locks ls printed %d lines, want %d (a header and a row per lock)", n, 1+len(keys)+len(holders))
	}
	for i, r := range out {
		if r != '\n' && invisible(r) {
			t.Errorf("locks ls printed %U at byte %d, which a terminal does not show as itself", r, i)
		}
	}
	cells := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n")[1:] {
		cell, _, _ := strings.Cut(line, "  ")
		cells[cell] = true
	}
	for _, k := range keys {
		q := shellquote.ANSIC(k)
		if !cells[q] {
			t.Errorf("no row whose key is %.80s (the $'...' form of %.60q)", q, k)
			continue
		}
		got, err := exec.Command(bash, "-c", "printf '%s' "+q).Output()
		if err != nil || string(got) != k {
			t.Errorf("bash reads %.80s back as %.60q (%v), want %.60q", q, got, err, k)
		}
	}
	for k, want := range map[string]string{"lock:h:1": `$'svc\xe2\x80\xae1@pod\x1b[2J pid 1'`, "lock:h:2": `$'svc\xe3\x85\xa4@pod\xc2\x9b2J pid 1'`} {
		if row := tableRow(t, out, k); !strings.Contains(row, "  "+want+"  ") {
			t.Errorf("row of %s %q: want its holder as %s", k, row, want)
		}
	}

	out, errOut, code = runCLI(t, "locks", "ls", "--redis", url, "-o", "json")
	if code != 0 {
		t.Fatalf("locks ls -o json: %d %s", code, errOut)
	}
	seen := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !json.Valid(line) || !utf8.Valid(line) {
			t.Errorf("-o json line is not valid JSON in UTF-8: %.120q", line)
			continue
		}
		var l agent.Lock
		if err := json.Unmarshal(line, &l); err != nil {
			t.Errorf("-o json line %.120q: %v", line, err)
			continue
		}
		seen[l.Key]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range append(keys, "lock:h:1", "lock:h:2") {
		if seen[k] != 1 {
			t.Errorf("-o json gave key %.60q %d times, want once, with its exact bytes", k, seen[k])
		}
	}
	if len(seen) != len(keys)+len(holders) {
		t.Errorf("-o json gave %d keys, want %d", len(seen), len(keys)+len(holders))
	}
}

// TestCLI_LocksLs_ACellWithSpacesIsOneQuotedCell: the table's columns are
// separated by runs of spaces, so a key (another application's, under the
// scanned pattern) holding a run of spaces could read as several cells of
// a one-row table: "lock:a  svc@pod-1 pid 7  1s" as a key, a pattern and a
// holder. A key or a holder's service or instance with a space in it is
// shown quoted as a shell quotes it ('lock:a  b'), so that it reads as one
// cell and pastes as one argument (lockgov locks show 'lock:a  b'); so is
// one beginning with a quote, which would read as a quoted cell. A key
// without a space is shown as it is. bash reads each quoted cell back to
// the key's bytes.
func TestCLI_LocksLs_ACellWithSpacesIsOneQuotedCell(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash not found:", err)
	}
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	value := `tok 7 {"service":"svc","instance":"pod-1","pid":7}`
	keys := map[string]string{ // key -> its KEY cell
		"lock:a  svc@pod-1 pid 7  1s  -": `'lock:a  svc@pod-1 pid 7  1s  -'`,
		"lock:order 1":                   `'lock:order 1'`,
		"lock:trailing ":                 `'lock:trailing '`,
		"'lock:q'":                       `''\''lock:q'\'''`,
		"lock:it's  x":                   `'lock:it'\''s  x'`,
		"lock:café  x":                   `$'lock:caf\xc3\xa9  x'`,
		"lock:plain":                     `lock:plain`,
	}
	for k := range keys {
		if err := c.Set(ctx, k, value, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Set(ctx, "lock:h", `tok 7 {"service":"svc  x","instance":"pod 1  2","pid":7}`, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "locks", "ls", "--redis", "redis://"+r.Addr(), "--pattern", "*")
	if code != 0 {
		t.Fatalf("locks ls: %d %s", code, errOut)
	}
	if n := strings.Count(out, "\n"); n != 2+len(keys) {
		t.Errorf("locks ls printed %d lines, want %d (a header and a row per lock):\n%s", n, 2+len(keys), out)
	}
	for k, cell := range keys {
		if shellquote.Quote(k) != cell {
			t.Fatalf("shellquote quotes %q as %s, not %s: the test's table is wrong", k, shellquote.Quote(k), cell)
		}
		row := tableRow(t, out, cell)
		if !strings.HasPrefix(row, cell+"  ") || !strings.Contains(row, "  svc@pod-1 pid 7  ") {
			t.Errorf("row of %q: %q, want its KEY cell %s, and the holder", k, row, cell)
		}
		got, err := exec.Command(bash, "-c", "printf '%s' "+cell).Output()
		if err != nil || string(got) != k {
			t.Errorf("bash reads %s back as %q (%v), want %q", cell, got, err, k)
		}
	}
	if row := tableRow(t, out, "lock:h"); !strings.Contains(row, `  'svc  x'@'pod 1  2' pid 7  `) {
		t.Errorf("row of lock:h %q: want the holder as 'svc  x'@'pod 1  2' pid 7", row)
	}
	if !strings.Contains(errOut, "values shown escaped") {
		t.Errorf("no note on stderr that values were quoted: %q", errOut)
	}
}
