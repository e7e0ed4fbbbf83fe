package analysis

import (
	"go/ast"
	"reflect"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/lockgov/lockgov/policy"
)

// configAnalyzer carries the options every analyzer shares (the policy
// file, whether test files are checked, the opt-in analyzers) as the x/tools
// analysis framework carries options: as flags of an analyzer, here one
// that the others require. Both drivers set them: Vet from Options, the
// vettool from -policy, -tests and -enable.
var configAnalyzer = &analysis.Analyzer{
	Name:       "lockgovconfig",
	Doc:        "lockgovconfig loads lockgov vet's shared options (policy file, test files, opt-in analyzers); it reports nothing.",
	Run:        runConfig,
	ResultType: reflect.TypeFor[*config](),
}

var (
	policyFlag string
	testsFlag  bool
	enableFlag string
)

func init() {
	configAnalyzer.Flags.StringVar(&policyFlag, "policy", "", "lockgov policy file: lock keys are the keys its patterns match (default: keys with a lock or mutex segment)")
	configAnalyzer.Flags.BoolVar(&testsFlag, "tests", false, "check _test.go files too (tests break locks on purpose)")
	configAnalyzer.Flags.StringVar(&enableFlag, "enable", "", "comma-separated opt-in analyzers to run: snowflakeclock")
}

// config is what configAnalyzer gives the other analyzers.
type config struct {
	policy   *policy.Policy  // nil: no policy file, use the default heuristic
	matcher  *policy.Matcher // for policy
	prefixes []string        // each declared pattern's literal text before its first placeholder
	exact    map[string]bool // declared patterns without placeholders: deliberate singleton keys
	tests    bool
	enabled  map[string]bool
	// testFiles are the package's test code: _test.go files and helpers
	// that import testing (a conformance suite). Filled before any
	// analyzer runs: the analyzers of one package run concurrently.
	testFiles map[string]bool
}

func runConfig(pass *analysis.Pass) (any, error) {
	c := &config{tests: testsFlag, enabled: map[string]bool{}, testFiles: map[string]bool{}}
	for _, f := range pass.Files {
		name := pass.Fset.File(f.Pos()).Name()
		if strings.HasSuffix(name, "_test.go") || importsTesting(f) {
			c.testFiles[name] = true
		}
	}
	for _, n := range strings.Split(enableFlag, ",") {
		if n = strings.TrimSpace(n); n != "" {
			c.enabled[n] = true
		}
	}
	if policyFlag == "" {
		return c, nil
	}
	p, err := policy.Load(policyFlag)
	if err != nil {
		return nil, err
	}
	c.policy = p
	c.matcher = policy.NewMatcher(p)
	c.exact = map[string]bool{}
	for _, r := range p.Patterns {
		lit, _, hasPlaceholder := strings.Cut(r.Pattern, "{")
		if !hasPlaceholder {
			c.exact[r.Pattern] = true
		}
		c.prefixes = append(c.prefixes, lit)
	}
	return c, nil
}

// configOf returns the shared options of pass.
func configOf(pass *analysis.Pass) *config {
	return pass.ResultOf[configAnalyzer].(*config)
}

// skip reports whether n is in a file the analyzers leave alone: test
// code, unless -tests.
func (c *config) skip(pass *analysis.Pass, n ast.Node) bool {
	return !c.tests && c.testFiles[pass.Fset.File(n.Pos()).Name()]
}

func importsTesting(f *ast.File) bool {
	for _, imp := range f.Imports {
		if imp.Path.Value == `"testing"` {
			return true
		}
	}
	return false
}

// declaredPattern returns the policy pattern that matches the constant
// key, or "".
func (c *config) declaredPattern(key string) string {
	if c.matcher == nil {
		return ""
	}
	_, rule := c.matcher.Match(key)
	return rule.Pattern
}
