package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lockgov/lockgov/internal/buildflags"
)

// analysisTestdata holds the spec snippets (specs/) and the stubs of
// go-redis and etcd (src/) that the analyzers' own tests use.
const analysisTestdata = "../../policy/analysis/testdata"

// TestVet runs the lockgov binary, built once, as a user and as go vet
// would: on the spec's snippets, copied into a module of their own.
func TestVet(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed: %v", err)
	}
	tmp := t.TempDir()
	bin := buildLockgov(t)
	mod := specModule(t, filepath.Join(tmp, "specs"))
	want := incidents(t, mod)
	if len(want) < 8 {
		t.Fatalf("found %d incident markers in the spec snippets, want at least 8", len(want))
	}

	t.Run("SpecSnippets_EachIncidentWithFileLineAndAnalyzer", func(t *testing.T) {
		out, errOut, code := runIn(t, mod, bin, "vet", "-enable", "snowflakeclock", "./...")
		if code != 1 {
			t.Fatalf("exit status %d, want 1 (findings)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		line := regexp.MustCompile(`^([^:]+\.go):(\d+):(\d+): \[(\w+)\] .+ \(rule: [a-z -]+\)$`)
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			m := line.FindStringSubmatch(l)
			if m == nil {
				t.Errorf("line not in the form file:line:col: [analyzer] message (rule: ...): %q", l)
				continue
			}
			got = append(got, m[1]+":"+m[2]+" "+m[4])
		}
		assertSameIncidents(t, got, want)
	})

	t.Run("CleanCode_PrintsNothingAndExitsZero", func(t *testing.T) {
		out, errOut, code := runIn(t, mod, bin, "vet", "-enable", "snowflakeclock", "./clean")
		if code != 0 || out != "" || errOut != "" {
			t.Fatalf("exit status %d, stdout %q, stderr %q; want 0 and no output", code, out, errOut)
		}
	})

	t.Run("JSON_FindingsWithAnalyzerAndRule", func(t *testing.T) {
		out, errOut, code := runIn(t, mod, bin, "vet", "-json", "./...")
		if code != 1 {
			t.Fatalf("exit status %d, want 1\nstderr:\n%s", code, errOut)
		}
		var doc struct {
			Findings []struct {
				Analyzer, Rule, File, Message string
				Line, Column                  int
			} `json:"findings"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, out)
		}
		var got []string
		for _, f := range doc.Findings {
			if f.Rule == "" || f.Message == "" || f.Column == 0 {
				t.Errorf("finding without rule, message or column: %+v", f)
			}
			got = append(got, f.File+":"+strconv.Itoa(f.Line)+" "+f.Analyzer)
		}
		assertSameIncidents(t, got, want)
	})

	t.Run("PatternMatchingNothing_IsAnErrorNamingIt", func(t *testing.T) {
		for _, pattern := range []string{"./nosuch/...", "./nosuchdir"} {
			_, errOut, code := runIn(t, mod, bin, "vet", pattern)
			if code != 2 || !strings.Contains(errOut, `pattern "`+pattern+`"`) {
				t.Errorf("vet %s: exit status %d, stderr %q; want 2 and an error naming the pattern", pattern, code, errOut)
			}
		}
	})

	t.Run("CodeThatDoesNotCompile_IsAnErrorNamingPackageAndError", func(t *testing.T) {
		broken := filepath.Join(mod, "broken")
		if err := os.MkdirAll(broken, 0o755); err != nil {
			t.Fatal(err)
		}
		src := "package broken\n\nfunc f() int { return undefinedThing }\n"
		if err := os.WriteFile(filepath.Join(broken, "broken.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(broken)
		_, errOut, code := runIn(t, mod, bin, "vet", "./...")
		if code != 2 || !strings.Contains(errOut, "example.com/specs/broken does not compile") || !strings.Contains(errOut, "undefined: undefinedThing") {
			t.Errorf("exit status %d, stderr %q; want 2 and the package and its compile error", code, errOut)
		}
	})

	t.Run("BadPolicy_IsAnErrorNamingTheFile", func(t *testing.T) {
		_, errOut, code := runIn(t, mod, bin, "vet", "-policy", "nosuch.yaml", "./...")
		if code != 2 || !strings.Contains(errOut, "nosuch.yaml") {
			t.Errorf("exit status %d, stderr %q; want 2 and the file named", code, errOut)
		}
	})

	t.Run("GoVetVettool_ReportsTheSameIncidents", func(t *testing.T) {
		out, errOut, code := runIn(t, mod, goBin, "vet", "-vettool="+bin, "./...")
		if code == 0 {
			t.Fatalf("go vet -vettool exited 0 on the spec snippets\n%s%s", out, errOut)
		}
		// go vet prints file:line:col: message (rule: ...) without the
		// analyzer's name: compare positions, and that each is a finding.
		line := regexp.MustCompile(`^(\S+\.go):(\d+):(\d+): .+ \(rule: [a-z -]+\)$`)
		var got []string
		for _, l := range strings.Split(out+errOut, "\n") {
			if m := line.FindStringSubmatch(l); m != nil {
				got = append(got, filepath.Clean(m[1])+":"+m[2])
			}
		}
		var wantPos []string
		for _, w := range want {
			wantPos = append(wantPos, strings.Fields(w)[0])
		}
		assertSameIncidents(t, got, wantPos)
	})

	t.Run("GoVetVettool_ClearErrorForBadPolicy", func(t *testing.T) {
		missing := filepath.Join(tmp, "missing-policy.yaml")
		out, errOut, code := runIn(t, mod, goBin, "vet", "-vettool="+bin, "-policy="+missing, "./clean")
		if code == 0 || !strings.Contains(out+errOut, "missing-policy.yaml") {
			t.Errorf("exit status %d, output %q; want a failure naming the policy file", code, out+errOut)
		}
	})
}

// specModule copies the spec snippets into dir as module example.com/specs,
// with the go-redis and etcd stubs as replaced modules of their own.
func specModule(t *testing.T, dir string) string {
	t.Helper()
	copyTree(t, filepath.Join(analysisTestdata, "specs"), dir)
	stubs := map[string]string{
		"github.com/redis/go-redis/v9": "stubs/go-redis",
		"go.etcd.io/etcd/client/v3":    "stubs/etcd",
	}
	gomod := "module example.com/specs\n\ngo 1.26\n\nrequire (\n\tgithub.com/redis/go-redis/v9 v9.0.0\n\tgo.etcd.io/etcd/client/v3 v3.0.0\n)\n\nreplace (\n"
	for path, sub := range stubs {
		copyTree(t, filepath.Join(analysisTestdata, "src", filepath.FromSlash(path)), filepath.Join(dir, sub))
		writeFile(t, filepath.Join(dir, sub, "go.mod"), "module "+path+"\n\ngo 1.26\n")
		gomod += "\t" + path + " => ./" + sub + "\n"
	}
	writeFile(t, filepath.Join(dir, "go.mod"), gomod+")\n")
	return dir
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// incidents reads the "// incident: ANALYZER..." markers of the snippets:
// "file.go:LINE analyzer" for each.
func incidents(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for n := 1; sc.Scan(); n++ {
			if _, names, ok := strings.Cut(sc.Text(), "// incident: "); ok {
				for _, a := range strings.Fields(names) {
					out = append(out, filepath.Base(f)+":"+strconv.Itoa(n)+" "+a)
				}
			}
		}
	}
	return out
}

func assertSameIncidents(t *testing.T, got, want []string) {
	t.Helper()
	slices.Sort(got)
	slices.Sort(want)
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing: %s", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("unexpected: %s", g)
		}
	}
}

// runIn runs name with args in dir, with the go command kept off the
// network and out of any workspace; it returns stdout, stderr and the exit
// status.
func runIn(t *testing.T, dir, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	// buildflags.Env: the packages vet loads compile with this test
	// binary's -race, which go test compiled the standard library with.
	cmd.Env = append(buildflags.Env(nil), "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	default:
		t.Fatalf("%s %v: %v", name, args, err)
		return "", "", -1
	}
}
