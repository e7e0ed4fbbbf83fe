package analysis

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"

	"github.com/lockgov/lockgov/policy"
)

// ErrInput matches (errors.Is) every Vet error that is about its input
// rather than a failure of the analysis: a pattern that matches nothing, a
// package that does not compile, a bad policy file, an unknown analyzer.
var ErrInput = errors.New("bad input to lockgov vet")

// inputError is an error about Vet's input; its message is err's alone.
type inputError struct{ err error }

func (e inputError) Error() string        { return e.err.Error() }
func (e inputError) Unwrap() error        { return e.err }
func (e inputError) Is(target error) bool { return target == ErrInput }

func inputErrorf(format string, a ...any) error { return inputError{fmt.Errorf(format, a...)} }

// Options configures Vet.
type Options struct {
	// Dir is where package patterns are resolved; "" is the current
	// directory.
	Dir string
	// Patterns are go package patterns; none means ".".
	Patterns []string
	// Policy is a lockgov policy file: its patterns say which keys are lock
	// keys. Empty uses the lock/mutex word heuristic.
	Policy string
	// Enable adds opt-in analyzers by name (snowflakeclock).
	Enable []string
	// Tests includes _test.go files, which are skipped by default: tests
	// break locks on purpose.
	Tests bool
	// Env is the environment of the go command; nil is os.Environ().
	Env []string
}

// Finding is one problem Vet found.
type Finding struct {
	Analyzer string `json:"analyzer"`
	Rule     string `json:"rule"`
	Package  string `json:"package"`
	File     string `json:"file"` // relative to Options.Dir when inside it
	Line     int    `json:"line"`
	Column   int    `json:"column"`
	Message  string `json:"message"`
	// Fixes are the suggested fixes' descriptions.
	Fixes []string `json:"suggested_fixes,omitempty"`
}

// String formats f as vet does, with the analyzer and the rule:
// file:line:col: [analyzer] message (rule: R).
func (f Finding) String() string {
	return fmt.Sprintf("%s:%d:%d: [%s] %s (rule: %s)", f.File, f.Line, f.Column, f.Analyzer, f.Message, f.Rule)
}

// vetMu serialises Vet: the analyzers' shared options are flags of an
// analyzer, as the x/tools framework has it, so one run at a time.
var vetMu sync.Mutex

// Vet loads the packages and runs the analyzers over them. Findings are
// sorted by file and position. An error matches ErrInput when the patterns
// match nothing or the code does not compile (naming the pattern or the
// package and the compiler's error), or ctx's error.
func Vet(ctx context.Context, opts Options) ([]Finding, error) {
	for _, name := range opts.Enable {
		if !slices.Contains(OptIn(), name) {
			return nil, inputErrorf("unknown analyzer %q (opt-in analyzers: %s)", name, strings.Join(OptIn(), ", "))
		}
	}
	if opts.Policy != "" {
		if _, err := policy.Load(opts.Policy); err != nil {
			return nil, inputError{err}
		}
	}
	dir := opts.Dir
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	patterns := opts.Patterns
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	if err := checkPatterns(ctx, dir, env, patterns); err != nil {
		return nil, err
	}
	cfg := &packages.Config{
		Context: ctx,
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles | packages.NeedImports |
			packages.NeedTypes | packages.NeedTypesSizes | packages.NeedSyntax | packages.NeedTypesInfo | packages.NeedModule,
		Dir:   dir,
		Env:   env,
		Tests: opts.Tests,
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, inputError{err}
	}
	if err := loadErrors(pkgs); err != nil {
		return nil, err
	}

	vetMu.Lock()
	defer vetMu.Unlock()
	policyFlag, testsFlag, enableFlag = opts.Policy, opts.Tests, strings.Join(opts.Enable, ",")
	defer func() { policyFlag, testsFlag, enableFlag = "", false, "" }()
	if policyFlag != "" {
		if policyFlag, err = filepath.Abs(policyFlag); err != nil {
			return nil, err
		}
	}
	graph, err := checker.Analyze(All(), pkgs, nil)
	if err != nil {
		return nil, err
	}
	var findings []Finding
	seen := map[string]bool{}
	for act := range graph.All() {
		if !act.IsRoot {
			continue
		}
		if act.Err != nil {
			return nil, fmt.Errorf("%s: %w", act, act.Err)
		}
		for _, d := range act.Diagnostics {
			pos := act.Package.Fset.Position(d.Pos)
			f := Finding{
				Analyzer: act.Analyzer.Name,
				Rule:     d.Category,
				Package:  act.Package.PkgPath,
				File:     relTo(dir, pos.Filename),
				Line:     pos.Line,
				Column:   pos.Column,
				Message:  strings.TrimSuffix(d.Message, " (rule: "+d.Category+")"),
			}
			key := f.String()
			if seen[key] {
				continue // a file in both a package and its test variant
			}
			seen[key] = true
			for _, fix := range d.SuggestedFixes {
				f.Fixes = append(f.Fixes, fix.Message)
			}
			findings = append(findings, f)
		}
	}
	slices.SortFunc(findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column), cmp.Compare(a.Analyzer, b.Analyzer))
	})
	return findings, nil
}

// checkPatterns fails naming the first pattern that matches no package.
// Listing names only is cheap: nothing is compiled.
func checkPatterns(ctx context.Context, dir string, env []string, patterns []string) error {
	for _, p := range patterns {
		pkgs, err := packages.Load(&packages.Config{Context: ctx, Mode: packages.NeedName | packages.NeedFiles, Dir: dir, Env: env}, p)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return inputErrorf("pattern %q: %w", p, err)
		}
		if len(pkgs) == 0 {
			return inputErrorf("pattern %q matched no packages", p)
		}
		for _, pkg := range pkgs {
			if len(pkg.Errors) > 0 && len(pkg.GoFiles) == 0 {
				msg := strings.TrimPrefix(pkg.Errors[0].Msg, "pattern "+p+": ")
				return inputErrorf("pattern %q: %s", p, msg)
			}
		}
	}
	return nil
}

// loadErrors reports the packages that do not compile, with their errors:
// the parser's and type checker's when there are some (the go command's
// report of the same problem would repeat them), else the go command's.
func loadErrors(pkgs []*packages.Package) error {
	var msgs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		if len(p.Errors) == 0 {
			return
		}
		perrs := slices.DeleteFunc(slices.Clone(p.Errors), func(e packages.Error) bool { return e.Kind == packages.ListError })
		if len(perrs) == 0 {
			perrs = p.Errors
		}
		var errs []string
		for i, e := range perrs {
			if i == 10 {
				errs = append(errs, fmt.Sprintf("\t... and %d more", len(perrs)-10))
				break
			}
			errs = append(errs, "\t"+strings.ReplaceAll(e.Error(), "\n", "\n\t"))
		}
		msgs = append(msgs, fmt.Sprintf("package %s does not compile:\n%s", p.PkgPath, strings.Join(errs, "\n")))
	})
	if len(msgs) == 0 {
		return nil
	}
	slices.Sort(msgs)
	return inputErrorf("%s", strings.Join(msgs, "\n"))
}

func relTo(dir, file string) string {
	if rel, err := filepath.Rel(dir, file); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return file
}

// WriteText writes one line per finding: file:line:col: [analyzer] message
// (rule: R). No findings, no output.
func WriteText(w io.Writer, findings []Finding) error {
	for _, f := range findings {
		if _, err := fmt.Fprintln(w, f); err != nil {
			return err
		}
	}
	return nil
}

// WriteJSON writes {"findings": [...]}, an empty list when there are none.
func WriteJSON(w io.Writer, findings []Finding) error {
	if findings == nil {
		findings = []Finding{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Findings []Finding `json:"findings"`
	}{findings})
}
