package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockgov/lockgov/internal/generate"
)

func TestRunGenerate_WritesChecksAndRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := filepath.Join(dir, "mixin.yaml")
	if err := os.WriteFile(cfg, []byte("selectors:\n  cluster: prod-eu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runGenerate(out, "operator", cfg, ""); err != nil {
		t.Fatal(err)
	}
	if err := runGenerate("", "operator", cfg, out); err != nil {
		t.Fatalf("check of fresh output: %v", err)
	}
	// The same output checked against the default config is stale.
	if err := runGenerate("", "operator", "", out); !errors.Is(err, generate.ErrStale) {
		t.Fatalf("check with another config: %v", err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("thresholds:\n  skew_reject: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		out, format, config, check, want string
	}{
		{out, "plain", bad, "", bad + `:2: thresholds.skew_reject: "soon" is not a duration`},
		{out, "plain", filepath.Join(dir, "none.yaml"), "", "none.yaml: no such file"},
		{notDir, "plain", "", "", notDir + " is a file, not a directory"},
		{out, "helm", "", "", `unknown format "helm"`},
		{"", "plain", "", "", "--out DIR or --check DIR is required"},
		{out, "plain", "", out, "exclude each other"},
		{"", "plain", "", filepath.Join(dir, "missing"), "no such file"},
	} {
		err := runGenerate(tc.out, tc.format, tc.config, tc.check)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("runGenerate(%q, %q, %q, %q) = %v, want %q", tc.out, tc.format, tc.config, tc.check, err, tc.want)
		}
	}
}

// TestGenerateCheck_TheCommandItNamesMakesTheDirectoryCurrent: a stale
// --check names the command that regenerates the directory; a GitOps CI
// user runs it as printed. For an operator-format directory with a config
// block that command must carry --format and --config, or it writes plain
// files with the default thresholds and the next check fails again.
func TestGenerateCheck_TheCommandItNamesMakesTheDirectoryCurrent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my generated")
	cfg := filepath.Join(t.TempDir(), "mixin.yaml")
	if err := os.WriteFile(cfg, []byte("selectors:\n  cluster: prod-eu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runGenerate(dir, "operator", "", ""); err != nil { // the config block changed since
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, "generate", "--check", dir, "--format", "operator", "--config", cfg)
	if code != 1 {
		t.Fatalf("check of stale output: exit %d, stderr %q", code, errOut)
	}
	_, rest, ok := strings.Cut(errOut, "(run ")
	command, _, ok2 := strings.Cut(rest, ")\n")
	if !ok || !ok2 {
		t.Fatalf("the stale check names no command to run: %q", errOut)
	}
	args, err := shellWords(command)
	if err != nil || len(args) < 2 || args[0] != "lockgov" {
		t.Fatalf("%q is not a lockgov command line: %v", command, err)
	}
	if _, errOut, code := runCLI(t, args[1:]...); code != 0 {
		t.Fatalf("%s: exit %d: %s", command, code, errOut)
	}
	if _, errOut, code := runCLI(t, "generate", "--check", dir, "--format", "operator", "--config", cfg); code != 0 {
		t.Errorf("after running %q, as the stale check said, the check still fails: exit %d\n%s", command, code, errOut)
	}
}

// shellWords splits a command line the way a POSIX shell does for words
// in plain text and single quotes (the forms shellquote.Quote writes).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, quoted := false, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			in = true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quoted {
		return nil, errors.New("unterminated quote")
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// TestGenerateCheck_AnExtraFileIsNamedAsOneToRemove: generate writes files
// and never deletes one, so a file the check reports as extra (a dashboard
// a newer lockgov no longer generates, a hand-made file) stays after the
// command the check names; the message must say that it is to be removed,
// or a user who runs that command sees the same failure again.
func TestGenerateCheck_AnExtraFileIsNamedAsOneToRemove(t *testing.T) {
	dir := t.TempDir()
	if err := runGenerate(dir, "plain", "", ""); err != nil {
		t.Fatal(err)
	}
	extra := filepath.Join(dir, "dashboards", "lockgov-retired.json")
	if err := os.WriteFile(extra, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, "generate", "--check", dir)
	if code != 1 {
		t.Fatalf("check with an extra file: exit %d, stderr %q", code, errOut)
	}
	_, rest, _ := strings.Cut(errOut, "(run ")
	command, _, _ := strings.Cut(rest, ")")
	command, _, _ = strings.Cut(command, ";")
	args, err := shellWords(command)
	if err != nil || len(args) < 2 {
		t.Fatalf("no command in %q", errOut)
	}
	if _, e, c := runCLI(t, args[1:]...); c != 0 {
		t.Fatalf("%s: exit %d %s", command, c, e)
	}
	if _, again, c := runCLI(t, "generate", "--check", dir); c == 0 || !strings.Contains(errOut, "remove") {
		t.Errorf("after %q the check exits %d (%q); the first check's message does not say to remove the extra file:\n%s", command, c, again, errOut)
	}
	if err := os.Remove(extra); err != nil {
		t.Fatal(err)
	}
	if _, e, c := runCLI(t, "generate", "--check", dir); c != 0 {
		t.Errorf("after the command and removing the extra file, the check exits %d: %s", c, e)
	}
}
