package policy

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse holds that Parse never panics, that a refusal is nothing but
// *Error values naming the file (and wrapping ErrInvalid) with no policy
// returned, that an accepted policy passes Validate, and that writing an
// accepted policy back as YAML and parsing it again gives the same policy.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(example),
		"",
		"version: 1\n",
		"version: 2\n",
		"defaults: {ttl: 5s, max_ttl: 1s}\n",
		"patterns:\n  - pattern: \"lock:{a}{b}\"\n",
		"patterns:\n  - &p {pattern: \"a:{x}\", ttl: 1s}\n  - *p\n",
		"skew: {degrade: 1s, reject: 2s, degrade_ttl_factor: NaN}\n",
		"max_patterns: 0\n",
		"a: [\n",
		"--- 1\n--- 2\n",
		"defaults: {wait: {strategy: retry, min: 0s}}\n",
		"defaults: {ttl: !!binary aGVsbG8=}\n",
		"? [a]\n: b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.yaml"
		p, err := Parse(name, data)
		if err != nil {
			if p != nil {
				t.Fatalf("Parse returned a policy with error %v", err)
			}
			checkPolicyErrors(t, name, err)
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse accepted a policy Validate refuses: %v", err)
		}
		text, ok := formatPolicy(p)
		if !ok {
			return // a pattern that is not UTF-8 has no YAML form
		}
		again, err := Parse("again.yaml", []byte(text))
		if err != nil {
			t.Fatalf("the formatted policy does not parse: %v\n%s", err, text)
		}
		if !reflect.DeepEqual(p, again) {
			t.Fatalf("parse(format(p)) != p:\n%+v\n%+v\n%s", p, again, text)
		}
	})
}

// checkPolicyErrors asserts that err is a join of *Error values that name
// the file, say what is wrong and wrap ErrInvalid.
func checkPolicyErrors(t *testing.T, name string, err error) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error does not wrap ErrInvalid: %v", err)
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var pe *Error
		if !errors.As(e, &pe) {
			t.Fatalf("error %T %v is not a *policy.Error", e, e)
		}
		if pe.File != name || !strings.HasPrefix(pe.Error(), name) {
			t.Fatalf("error %q does not name the file %q", pe.Error(), name)
		}
		if strings.TrimSpace(pe.Problem) == "" {
			t.Fatalf("error %+v says no problem", pe)
		}
	}
}

// formatPolicy writes every field of p as YAML. It reports false when a
// pattern is not valid UTF-8 (YAML text is UTF-8).
func formatPolicy(p *Policy) (string, bool) {
	var b strings.Builder
	b.WriteString("version: 1\ndefaults:\n")
	formatRule(&b, "  ", p.Defaults)
	b.WriteString("patterns:\n")
	if len(p.Patterns) == 0 {
		b.WriteString("  []\n")
	}
	for _, r := range p.Patterns {
		if !utf8.ValidString(r.Pattern) {
			return "", false
		}
		q, _ := json.Marshal(r.Pattern) // JSON strings are YAML strings
		b.WriteString("  - pattern: " + string(q) + "\n")
		formatRule(&b, "    ", r)
	}
	b.WriteString("skew:\n")
	b.WriteString("  degrade: " + p.Skew.Degrade.String() + "\n")
	b.WriteString("  reject: " + p.Skew.Reject.String() + "\n")
	b.WriteString("  degrade_ttl_factor: " + strconv.FormatFloat(p.Skew.DegradeTTLFactor, 'g', -1, 64) + "\n")
	b.WriteString("max_patterns: " + strconv.Itoa(p.MaxPatterns) + "\n")
	return b.String(), true
}

func formatRule(b *strings.Builder, in string, r Rule) {
	b.WriteString(in + "mode: " + r.Mode.String() + "\n")
	b.WriteString(in + "ttl: " + r.TTL.String() + "\n")
	b.WriteString(in + "min_ttl: " + r.MinTTL.String() + "\n")
	b.WriteString(in + "max_ttl: " + r.MaxTTL.String() + "\n")
	b.WriteString(in + "max_hold: " + r.MaxHold.String() + "\n")
	w := r.Wait
	b.WriteString(in + "wait:\n")
	b.WriteString(in + "  strategy: " + w.Strategy.String() + "\n")
	b.WriteString(in + "  backoff: " + w.Backoff.String() + "\n")
	b.WriteString(in + "  min: " + w.Min.String() + "\n")
	b.WriteString(in + "  max: " + w.Max.String() + "\n")
	b.WriteString(in + "  attempts: " + strconv.Itoa(w.Attempts) + "\n")
	b.WriteString(in + "  poll_interval: " + w.PollInterval.String() + "\n")
}

// FuzzNormalize checks Normalize against a reference written with regular
// expressions: the same output, idempotence, the key itself when nothing
// is id-like, and no id-like segment left in the result.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"lock:order:12345",
		"lock:user:550e8400-e29b-41d4-a716-446655440000:profile",
		"lock:quota:{42}",
		"lock:{order:123}",
		"cache/obj/9f86d081884c7d65",
		"tok=01HZX3K5Q8M7N2P4R6T8V0W2Y4",
		"a|1#2.3/4=5",
		"lock::7:",
		"{}",
		"{{1}}",
		"lock:order:{id}",
		"\xff:1",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		got := Normalize(key)
		if want := normalizeReference(key); got != want {
			t.Fatalf("Normalize(%q) = %q, reference says %q", key, got, want)
		}
		if again := Normalize(got); again != got {
			t.Fatalf("Normalize is not idempotent: %q -> %q -> %q", key, got, again)
		}
		for _, seg := range segmentRE.FindAllString(got, -1) {
			if refIDLike(seg) {
				t.Fatalf("Normalize(%q) = %q keeps id-like segment %q", key, got, seg)
			}
		}
	})
}

var (
	segmentRE = regexp.MustCompile(`[^:/.#|={}]+`)
	digitsRE  = regexp.MustCompile(`^[0-9]+$`)
	hexRE     = regexp.MustCompile(`^[0-9a-fA-F]+$`)
	alnumRE   = regexp.MustCompile(`^[0-9a-zA-Z]+$`)
	letterRE  = regexp.MustCompile(`[a-zA-Z]`)
	digitRE   = regexp.MustCompile(`[0-9]`)
	uuidRE    = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// refIDLike is Normalize's doc comment, written as regular expressions.
func refIDLike(s string) bool {
	switch {
	case digitsRE.MatchString(s):
		return true
	case hexRE.MatchString(s) && (len(s) == 32 || len(s) >= 8 && digitRE.MatchString(s)):
		return true
	case alnumRE.MatchString(s) && len(s) >= 16 && digitRE.MatchString(s) && letterRE.MatchString(s):
		return true
	}
	return uuidRE.MatchString(s)
}

func normalizeReference(key string) string {
	var b strings.Builder
	last := 0
	for _, loc := range segmentRE.FindAllStringIndex(key, -1) {
		seg := key[loc[0]:loc[1]]
		if !refIDLike(seg) {
			continue
		}
		b.WriteString(key[last:loc[0]])
		if loc[0] > 0 && key[loc[0]-1] == '{' && loc[1] < len(key) && key[loc[1]] == '}' {
			b.WriteString("id")
		} else {
			b.WriteString("{id}")
		}
		last = loc[1]
	}
	if last == 0 {
		return key
	}
	b.WriteString(key[last:])
	return b.String()
}
