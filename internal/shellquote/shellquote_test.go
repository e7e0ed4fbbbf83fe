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
