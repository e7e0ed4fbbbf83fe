package shellquote_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/lockgov/lockgov/internal/shellquote"
)

// TestQuote_BashReadsBackTheSameBytes runs bash on each quoted string and
// compares what it prints with the original bytes: every form (as it is,
// single quotes, $'…') must mean exactly those bytes to a shell.
func TestQuote_BashReadsBackTheSameBytes(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash not found:", err)
	}
	cases := []string{
		"lock:order:42", "lock:a b", "it's", `back\slash`, "lock:\xff\xfe", "line\nbreak",
		"\x1b[2Jclear", "tab\there", "lock:café", "$'lock:\\xff'", "'", `\`, "%+,=@:./-_",
		// The attacks of h78: escape sequences (ESC [, OSC, C1 CSI as UTF-8
		// and as a raw byte), C1 controls, bidi overrides and isolates,
		// zero-width and default-ignorable code points, line and paragraph
		// separators, a byte then a hex digit (\x01a is not \x1a), a long
		// key, bytes that are not UTF-8, and shell syntax.
		"\x1b[31mred\x1b[0m", "\x1b]0;title\a", "\u009b2J", "\x9b2J\x85", string([]byte{0x80, 0x8f, 0x90, 0x9f}),
		"\u202egnp.exe", "\u2066x\u2067y\u2068z\u2069", "zw\u200bx\ufeff", "ls\u2028ps\u2029", "cgj\u034fvs\ufe0f\u3164",
		"\x01a\x0fF\x1b9", "lock:" + strings.Repeat("x\n", 4096), "\xc0\xaf\xed\xa0\x80\xc3\x28", "\xff'\xfe\\",
		"$(touch pwned)", "`touch pwned`", "!! $HOME ${x} *?[a] ~ {a,b} #c", "-h", "a\rb",
	}
	for _, s := range cases {
		for _, q := range []string{shellquote.Quote(s), shellquote.ANSIC(s)} {
			out, err := exec.Command(bash, "-c", "printf '%s' "+q).Output()
			if err != nil {
				t.Fatalf("bash on %s: %v", q, err)
			}
			if string(out) != s {
				t.Errorf("%q quoted as %s reads back as %q", s, q, out)
			}
			// What a terminal shows: printable ASCII only, so no escape
			// sequence, control or invisible code point reaches it.
			for i := 0; i < len(q); i++ {
				if q[i] < 0x20 || q[i] > 0x7e {
					t.Errorf("%q quoted as %q holds byte %#x: not printable ASCII", s, q, q[i])
					break
				}
			}
		}
	}
}

func TestQuote_Forms(t *testing.T) {
	for in, want := range map[string]string{
		"lock:order:42": "lock:order:42",
		"":              "''",
		"a b":           "'a b'",
		"it's":          `'it'\''s'`,
		"lock:\xff":     `$'lock:\xff'`,
		"a\x00b":        `$'a\x00b'`,
	} {
		if got := shellquote.Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
	if got := shellquote.ANSIC("plain"); got != "$'plain'" {
		t.Errorf("ANSIC(plain) = %s", got)
	}
	if got := shellquote.ANSIC("é"); !strings.HasPrefix(got, `$'\xc3\xa9`) {
		t.Errorf("ANSIC(é) = %s, want its UTF-8 bytes escaped", got)
	}
}
