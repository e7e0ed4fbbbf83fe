package analysis

import (
	"flag"
	"go/format"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"
)

// Each analyzer runs over its own package under testdata/src, which holds
// positive cases (a want comment on the line of each finding; the spec's
// snippets among them) and negative ones (no comment: no finding). Where
// an analyzer suggests a fix, the .golden file next to the source is the
// source with every fix applied. The go-redis, etcd, redsync, bsm and
// lockgov packages under testdata/src are stubs with the real import paths.

var update = flag.Bool("update", false, "rewrite the .golden files from the analyzers' suggested fixes")

func runAnalyzer(t *testing.T, a *analysis.Analyzer, pkg string) {
	t.Helper()
	if *update {
		writeGolden(t, analysistest.Run(t, analysistest.TestData(), a, pkg))
	}
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), a, pkg)
}

// writeGolden applies every suggested fix to its file and writes the
// result as file.golden (review the diff before committing it).
func writeGolden(t *testing.T, results []*analysistest.Result) {
	edits := map[string][]analysis.TextEdit{}
	var fset *token.FileSet
	for _, r := range results {
		fset = r.Action.Package.Fset
		for _, d := range r.Action.Diagnostics {
			for _, f := range d.SuggestedFixes {
				for _, e := range f.TextEdits {
					name := fset.File(e.Pos).Name()
					edits[name] = append(edits[name], e)
				}
			}
		}
	}
	for name, es := range edits {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(es, func(a, b analysis.TextEdit) int { return int(b.Pos - a.Pos) })
		out := slices.Clone(src)
		for _, e := range es {
			start, end := fset.File(e.Pos).Offset(e.Pos), fset.File(e.End).Offset(e.End)
			out = slices.Concat(out[:start], e.NewText, out[end:])
		}
		if formatted, err := format.Source(out); err == nil {
			out = formatted
		}
		if err := os.WriteFile(name+".golden", out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// withFlags sets the shared options for one test.
func withFlags(t *testing.T, pol string, enable string) {
	t.Helper()
	if pol != "" {
		abs, err := filepath.Abs(pol)
		if err != nil {
			t.Fatal(err)
		}
		pol = abs
	}
	policyFlag, enableFlag = pol, enable
	t.Cleanup(func() { policyFlag, enableFlag = "", "" })
}

func TestSetNXExpire(t *testing.T)       { runAnalyzer(t, SetNXExpire, "setnxexpire") }
func TestUnsafeUnlock(t *testing.T)      { runAnalyzer(t, UnsafeUnlock, "unsafeunlock") }
func TestBlindRenew(t *testing.T)        { runAnalyzer(t, BlindRenew, "blindrenew") }
func TestNoDeadline(t *testing.T)        { runAnalyzer(t, NoDeadline, "nodeadline") }
func TestMissingRelease(t *testing.T)    { runAnalyzer(t, MissingRelease, "missingrelease") }
func TestGlobalLockKey(t *testing.T)     { runAnalyzer(t, GlobalLockKey, "globallockkey") }
func TestMarkerBeforeWrite(t *testing.T) { runAnalyzer(t, MarkerBeforeWrite, "markerbeforewrite") }
func TestUncheckedTxn(t *testing.T)      { runAnalyzer(t, UncheckedTxn, "uncheckedtxn") }

func TestSnowflakeClock(t *testing.T) {
	withFlags(t, "", "snowflakeclock")
	runAnalyzer(t, SnowflakeClock, "snowflakeclock")
}

// TestSnowflakeClock_OffUnlessEnabled: opt-in means silent by default.
func TestSnowflakeClock_OffUnlessEnabled(t *testing.T) {
	res := analysistest.Run(ignoreWants{}, analysistest.TestData(), SnowflakeClock, "snowflakeclock")
	for _, r := range res {
		if n := len(r.Action.Diagnostics); n != 0 {
			t.Errorf("snowflakeclock not enabled, but it reported %d findings", n)
		}
	}
}

// ignoreWants drops analysistest's complaints (the want comments expect
// findings that a disabled analyzer does not make).
type ignoreWants struct{}

func (ignoreWants) Errorf(string, ...any) {}

// TestPolicy_PatternsDecideLockKeys: with -policy, a key is a lock key when
// its constant prefix matches a declared pattern, lock word or not; names
// still decide keys with no constant prefix.
func TestPolicy_PatternsDecideLockKeys(t *testing.T) {
	withFlags(t, "testdata/policy.yaml", "")
	runAnalyzer(t, UnsafeUnlock, "policykeys")
}

// TestPolicy_ExactPatternIsADeliberateSingleton: a constant key the policy
// declares exactly is not a global-lock finding; one it matches with a
// placeholder pattern still is.
func TestPolicy_ExactPatternIsADeliberateSingleton(t *testing.T) {
	withFlags(t, "testdata/policy.yaml", "")
	runAnalyzer(t, GlobalLockKey, "policyglobal")
}
