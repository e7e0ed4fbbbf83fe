package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParse_ExampleFileLoadsWithInheritance(t *testing.T) {
	p, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Patterns) != 3 {
		t.Fatalf("got %d patterns, want 3", len(p.Patterns))
	}
	quota := p.Patterns[0]
	want := Rule{
		Pattern: "lock:quota:{merchant_id}",
		Mode:    ModeEnforce,
		TTL:     10 * time.Second,
		MinTTL:  10 * time.Millisecond, // inherited
		MaxTTL:  time.Minute,
		MaxHold: 5 * time.Minute,
		Wait: Wait{
			Strategy: WaitRetry, Backoff: BackoffExponential,
			Min: 10 * time.Millisecond, Max: 500 * time.Millisecond, Attempts: 8,
			PollInterval: time.Second, // inherited from defaults.wait
		},
	}
	if !reflect.DeepEqual(quota, want) {
		t.Errorf("patterns[0] = %+v\nwant %+v", quota, want)
	}
	order := p.Patterns[1]
	if order.Wait.Strategy != WaitFailFast || order.TTL != 15*time.Second ||
		order.MaxTTL != 10*time.Minute || order.Wait.PollInterval != time.Second || order.Wait.Attempts != 5 {
		t.Errorf("patterns[1] did not inherit: %+v", order)
	}
	if p.Patterns[2].Mode != ModeAudit {
		t.Errorf("patterns[2].mode = %v", p.Patterns[2].Mode)
	}
	if p.Skew != Default().Skew || p.MaxPatterns != 200 {
		t.Errorf("skew/max_patterns = %+v / %d", p.Skew, p.MaxPatterns)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("parsed policy fails Validate: %v", err)
	}
}

func TestParse_PatternInheritsDefaultsSetInTheFileNotLibraryDefaults(t *testing.T) {
	p, err := Parse("p.yaml", []byte(`
patterns:
  - pattern: "a:{x}"
    wait: {strategy: retry}
defaults:
  mode: audit
  ttl: 1m
  max_hold: 2m
  wait: {backoff: constant, min: 50ms, attempts: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Patterns[0]
	if r.Mode != ModeAudit || r.TTL != time.Minute || r.MaxHold != 2*time.Minute ||
		r.Wait.Strategy != WaitRetry || r.Wait.Backoff != BackoffConstant ||
		r.Wait.Min != 50*time.Millisecond || r.Wait.Attempts != 3 {
		t.Errorf("pattern did not inherit defaults: %+v", r)
	}
	if p.Defaults.Wait.Strategy != WaitDeadline {
		t.Errorf("pattern's wait leaked into defaults: %+v", p.Defaults.Wait)
	}
}

func TestParse_EmptyFileIsDefault(t *testing.T) {
	for _, data := range []string{"", "\n# only a comment\n", "---\n", "version: 1\n", "null\n"} {
		p, err := Parse("empty.yaml", []byte(data))
		if err != nil {
			t.Errorf("Parse(%q): %v", data, err)
			continue
		}
		if !reflect.DeepEqual(p, Default()) {
			t.Errorf("Parse(%q) = %+v, want Default()", data, p)
		}
	}
}

func TestLoad_MissingFileNamesThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v; want an error naming %s that is os.ErrNotExist", err, path)
	}
}

func TestLoad_ErrorsNameTheFileAndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte("version: 1\ndefaults:\n  tll: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := path + ":3: defaults.tll: unknown field (known: mode, ttl, min_ttl, max_ttl, max_hold, wait)"
	if err == nil || err.Error() != want {
		t.Errorf("Load = %v\nwant %s", err, want)
	}
}

func TestParse_ErrorsNameFileLineAndField(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		line int
		want string // field path and problem
	}{
		{"unknown top-level field", "version: 1\nfoo: 1\n", 2, "foo: unknown field (known: version, defaults, patterns, skew, max_patterns)"},
		{"unknown defaults field", "version: 1\ndefaults:\n  tll: 30s\n", 3, "defaults.tll: unknown field (known: mode, ttl, min_ttl, max_ttl, max_hold, wait)"},
		{"unknown pattern field", "patterns:\n  - pattern: a\n    ttll: 1s\n", 3, "patterns[0].ttll: unknown field (known: pattern, mode,"},
		{"unknown wait field", "defaults:\n  wait: {strategy: retry, tries: 3}\n", 2, "defaults.wait.tries: unknown field"},
		{"unknown skew field", "skew:\n  warn: 1s\n", 2, "skew.warn: unknown field (known: degrade, reject, degrade_ttl_factor)"},
		{"duplicate field", "defaults:\n  ttl: 1s\n  ttl: 2s\n", 3, "defaults.ttl: duplicate field (first at line 2)"},
		{"negative ttl", "patterns:\n  - pattern: a\n\n\n\n\n    ttl: -5s\n", 7, `patterns[0].ttl: "-5s" must be > 0`},
		{"zero ttl", "defaults:\n  ttl: 0s\n", 2, `defaults.ttl: "0s" must be > 0`},
		{"bad duration", "defaults:\n  ttl: 30\n", 2, `defaults.ttl: "30" is not a duration`},
		{"duration of wrong type", "defaults:\n  max_hold: [1s]\n", 2, "defaults.max_hold: must be a duration (e.g. 30s, 250ms), got a list"},
		{"null duration", "defaults:\n  ttl:\n", 2, "defaults.ttl: must be a duration (e.g. 30s, 250ms), got null"},
		{"defaults not a mapping", "defaults: 5\n", 1, `defaults: must be a mapping, got "5"`},
		{"patterns not a list", "patterns: {a: 1}\n", 1, "patterns: must be a list, got a mapping"},
		{"pattern item not a mapping", "patterns:\n  - lock:a\n", 2, `patterns[0]: must be a mapping, got "lock:a"`},
		{"min_ttl above ttl", "defaults:\n  ttl: 1s\n  min_ttl: 2s\n", 2, `defaults.ttl: min_ttl "2s" must be <= ttl "1s"`},
		{"explicit min_ttl above inherited ttl", "patterns:\n  - pattern: a\n    min_ttl: 1m\n", 3, `patterns[0].min_ttl: min_ttl "1m0s" must be <= ttl "30s"`},
		{"explicit ttl above inherited max_ttl", "patterns:\n  - pattern: a\n    ttl: 20m\n", 3, `patterns[0].ttl: ttl "20m0s" must be <= max_ttl "10m0s"`},
		{"ttl above max_ttl", "defaults:\n  ttl: 1m\n  max_ttl: 30s\n", 2, `defaults.ttl: ttl "1m0s" must be <= max_ttl "30s"`},
		{"negative max_hold", "defaults:\n  max_hold: -1s\n", 2, `defaults.max_hold: "-1s" must be >= 0`},
		{"retry with zero attempts", "patterns:\n  - pattern: a\n    wait:\n      strategy: retry\n      attempts: 0\n", 5, "patterns[0].wait.attempts: 0 must be >= 1 for strategy retry"},
		{"attempts not an integer", "defaults:\n  wait: {attempts: many}\n", 2, `defaults.wait.attempts: "many" is not an integer`},
		{"backoff min above max", "defaults:\n  wait:\n    min: 2s\n    max: 1s\n", 3, `defaults.wait.min: backoff min "2s" must be <= max "1s"`},
		{"explicit backoff max below inherited min", "patterns:\n  - pattern: a\n    wait: {max: 1ms}\n", 3, `patterns[0].wait.max: backoff min "10ms" must be <= max "1ms"`},
		{"retry with zero min", "defaults:\n  wait:\n    strategy: retry\n    min: 0s\n", 4, `defaults.wait.min: "0s" must be > 0 for strategy retry`},
		{"unknown mode", "defaults:\n  mode: strict\n", 2, `defaults.mode: unknown mode "strict" (known: enforce, audit, off)`},
		{"unknown strategy", "defaults:\n  wait: {strategy: forever}\n", 2, `defaults.wait.strategy: unknown wait strategy "forever"`},
		{"unknown backoff", "defaults:\n  wait: {backoff: linear}\n", 2, `defaults.wait.backoff: unknown backoff "linear"`},
		{"mode of wrong type", "defaults:\n  mode: [enforce]\n", 2, "defaults.mode: must be a string, got a list"},
		{"degrade equal to reject", "skew:\n  degrade: 500ms\n  reject: 500ms\n", 3, `skew.reject: degrade "500ms" must be < reject "500ms"`},
		{"explicit degrade above inherited reject", "skew:\n  degrade: 1s\n", 2, `skew.degrade: degrade "1s" must be < reject "500ms"`},
		{"explicit reject below inherited degrade", "skew:\n  reject: 50ms\n", 2, `skew.reject: degrade "100ms" must be < reject "50ms"`},
		{"zero degrade", "skew:\n  degrade: 0s\n", 2, `skew.degrade: "0s" must be > 0`},
		{"factor above 1", "skew:\n  degrade_ttl_factor: 1.5\n", 2, "skew.degrade_ttl_factor: 1.5 must be in (0, 1]"},
		{"factor zero", "skew:\n  degrade_ttl_factor: 0\n", 2, "skew.degrade_ttl_factor: 0 must be in (0, 1]"},
		{"factor not a number", "skew:\n  degrade_ttl_factor: .nan\n", 2, `skew.degrade_ttl_factor: ".nan" is not a number`},
		{"max_patterns zero", "version: 1\nmax_patterns: 0\n", 2, "max_patterns: 0 must be >= 1"},
		{"max_patterns not an integer", "max_patterns: 1.5\n", 1, `max_patterns: "1.5" is not an integer`},
		{"unknown version", "version: 2\n", 1, "version: 2 is not supported (only 1)"},
		{"missing pattern", "patterns:\n  - ttl: 1s\n", 2, "patterns[0].pattern: must not be empty"},
		{"empty pattern", "patterns:\n  - pattern: \"\"\n", 2, "patterns[0].pattern: must not be empty"},
		{"duplicate pattern", "patterns:\n  - pattern: a:{x}\n  - pattern: b\n  - pattern: a:{x}\n", 4, `patterns[2].pattern: "a:{x}" duplicates patterns[0]`},
		{"unclosed brace", "patterns:\n  - pattern: \"a:{x\"\n", 2, `patterns[0].pattern: "a:{x": unbalanced braces`},
		{"stray closing brace", "patterns:\n  - pattern: \"a:x}\"\n", 2, `patterns[0].pattern: "a:x}": unbalanced braces`},
		{"nested brace", "patterns:\n  - pattern: \"a:{x{y}}\"\n", 2, "unbalanced braces"},
		{"empty placeholder", "patterns:\n  - pattern: \"a:{}\"\n", 2, `patterns[0].pattern: "a:{}": empty placeholder name`},
		{"adjacent placeholders", "patterns:\n  - pattern: \"a:{x}{y}\"\n", 2, `patterns[0].pattern: "a:{x}{y}": adjacent placeholders`},
		{"yaml syntax", "defaults:\n  ttl: 1s\n bad: [\n", 2, "yaml: did not find expected key"},
		{"second document", "version: 1\n---\nversion: 1\n", 2, "more than one YAML document"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("policy.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded; want an error containing %q", c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v is not ErrInvalid", err)
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.File != "policy.yaml" || pe.Line != c.line {
				t.Errorf("first error %+v: want file policy.yaml line %d", pe, c.line)
			}
			prefix := "policy.yaml:" + strconv.Itoa(c.line) + ": "
			if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, c.want) {
				t.Errorf("error\n  %s\nwant prefix %q and text %q", msg, prefix, c.want)
			}
		})
	}
}

func TestParse_ReportsEveryProblem(t *testing.T) {
	_, err := Parse("p.yaml", []byte("defaults:\n  tll: 1s\n  mode: loud\nmax_patterns: 0\n"))
	if err == nil {
		t.Fatal("want errors")
	}
	msg := err.Error()
	for _, want := range []string{"p.yaml:2: defaults.tll:", "p.yaml:3: defaults.mode:", "p.yaml:4: max_patterns:"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

func TestParse_AnchorsAndAliasesResolve(t *testing.T) {
	p, err := Parse("p.yaml", []byte(`
defaults:
  wait: &w {strategy: retry, attempts: 2}
patterns:
  - pattern: "a:{x}"
    wait: *w
`))
	if err != nil {
		t.Fatal(err)
	}
	if w := p.Patterns[0].Wait; w.Strategy != WaitRetry || w.Attempts != 2 {
		t.Errorf("wait = %+v", w)
	}
}

func TestValidate_DefaultIsValidAndGoBuiltRulesAreComplete(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	p := Default()
	p.Patterns = []Rule{{Pattern: "a:{x}", TTL: time.Second}} // MaxTTL 0 is not "inherit"
	err := p.Validate()
	if err == nil || !strings.Contains(err.Error(), "patterns[0].max_ttl:") {
		t.Errorf("Validate = %v; want a patterns[0].max_ttl error", err)
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.File != "" || pe.Line != 0 {
		t.Errorf("Validate error %+v should carry no file or line", pe)
	}
}
