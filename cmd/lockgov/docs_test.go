package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// optional is a "[--flag VALUE]" a usage line writes around what may be
// left out.
var optional = regexp.MustCompile(`\[[^\]]*\]`)

// TestDocs_CommandLinesParse: every `lockgov` command line of the sh
// blocks of README.md and docs/*.md (runbooks have their own test, which
// runs them) names a command lockgov has and only flags that command
// accepts, with values it takes. A renamed flag or command cannot leave a
// README whose first command fails with "unknown flag". Nothing runs:
// the line is parsed as lockgov would parse it. vet parses its own flags
// (go vet's protocol) and is left to its own tests.
func TestDocs_CommandLinesParse(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, path := range append([]string{"../../README.md"}, docs...) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		inSh := false
		for i, line := range strings.Split(string(data), "\n") {
			where := fmt.Sprintf("%s:%d", strings.TrimPrefix(path, "../../"), i+1)
			trimmed := strings.TrimSpace(line)
			switch {
			case trimmed == "```sh":
				inSh = true
				continue
			case strings.HasPrefix(trimmed, "```"):
				inSh = false
				continue
			case !inSh:
				continue
			}
			cmdline, _, _ := strings.Cut(trimmed, "#")
			cmdline = optional.ReplaceAllString(cmdline, "")
			words, err := shellWords(cmdline)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
				words = words[1:] // VAR=value before the command
			}
			switch {
			case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/lockgov":
				words = words[3:]
			case len(words) >= 1 && words[0] == "lockgov":
				words = words[1:]
			default:
				continue
			}
			root := newRoot(nil, nil)
			cmd, rest, err := root.Find(words)
			if err != nil {
				t.Errorf("%s: %s: %v", where, cmdline, err)
				continue
			}
			if cmd.Name() == "vet" {
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("%s: lockgov %s does not take this command line: %v\n\t%s", where, cmd.Name(), err, cmdline)
				continue
			}
			if cmd.Args != nil {
				if err := cmd.Args(cmd, cmd.Flags().Args()); err != nil {
					t.Errorf("%s: lockgov %s: %v\n\t%s", where, cmd.Name(), err, cmdline)
				}
			}
			checked++
		}
	}
	if checked < 10 {
		t.Errorf("checked %d command lines: the extraction is broken", checked)
	}
}
