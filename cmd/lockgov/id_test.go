package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestIDCmd_RefusesBadInputWithClearErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "missing subcommand"},
		{[]string{"frob"}, `unknown command "frob"`},
		{[]string{"decode"}, "needs at least one id"},
		{[]string{"decode", "abc"}, `"abc" is not a decimal 64-bit integer`},
		{[]string{"decode", "-5"}, "unknown shorthand flag: '5' in -5"},
		{[]string{"decode", "--layout", "41/10/11", "1"}, "sum to 62, want 63"},
		{[]string{"decode", "--epoch", "yesterday", "1"}, "want RFC 3339"},
		{[]string{"gen"}, "--worker is required"},
		{[]string{"gen", "--worker", "1024"}, "worker id 1024 out of range [0, 1023]"},
		{[]string{"gen", "--worker", "-1"}, "worker id -1 out of range"},
		{[]string{"gen", "--worker", "1", "-n", "0"}, "-n 0: want n > 0"},
		{[]string{"gen", "--worker", "1", "--epoch", "2999-01-01T00:00:00Z"}, "is in the future"},
		{[]string{"gen", "--worker", "1", "--layout", "41/10"}, "want time/worker/sequence"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := idCmd(tc.args, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestIDCmd_GenThenDecode(t *testing.T) {
	var out bytes.Buffer
	if err := idCmd([]string{"gen", "--worker", "42", "-n", "5000"}, &out); err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(out.String())
	if len(ids) != 5000 {
		t.Fatalf("%d IDs, want 5000", len(ids))
	}
	out.Reset()
	if err := idCmd([]string{"decode", ids[0], ids[4999]}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "worker=42") || !strings.Contains(lines[1], "layout=41/10/12") {
		t.Fatalf("decode output:\n%s", out.String())
	}
	out.Reset()
	if err := idCmd([]string{"decode", "4194304"}, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "id=4194304 time=2024-01-01T00:00:00.001Z worker=0 sequence=0 layout=41/10/12" {
		t.Fatalf("decode 1<<22 = %q", got)
	}
	out.Reset()
	if err := idCmd([]string{"gen", "--worker", "31", "--layout", "jssafe", "-n", "3"}, &out); err != nil {
		t.Fatal(err)
	}
}

func TestRun_ExitCodes(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "  id ") || stdout.Len() > 0 {
		t.Fatalf("no args: code %d, stdout %q, stderr %q; want 2 and the help on stderr", code, stdout.String(), stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"nope"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown command "nope"`) {
		t.Fatalf("unknown command: code %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"id", "gen", "--worker", "5000"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "lockgov id gen: ") {
		t.Fatalf("bad worker: code %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"id", "gen", "--nope"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "unknown flag: --nope") {
		t.Fatalf("unknown flag: code %d, %q", code, stderr.String())
	}
}

// TestIDCmd_GenHelpShowsNoDefaultForTheRequiredWorker holds that `id gen
// --help` does not offer a default for --worker, which has none: it showed
// "(default -1)", a value gen refuses.
func TestIDCmd_GenHelpShowsNoDefaultForTheRequiredWorker(t *testing.T) {
	var out bytes.Buffer
	if err := idCmd([]string{"gen", "--help"}, &out); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(out.String()) {
		if strings.HasPrefix(strings.TrimSpace(line), "--worker ") { // the flag's line, not the usage line
			if strings.Contains(line, "default") {
				t.Fatalf("--worker is required, yet its help line offers a default: %q", line)
			}
			return
		}
	}
	t.Fatalf("no --worker line in the help:\n%s", out.String())
}
