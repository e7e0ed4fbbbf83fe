package policy

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Wait says how Acquire waits for a lock someone else holds.
type Wait struct {
	Strategy WaitStrategy
	Backoff  BackoffKind
	// Min and Max bound the pause between retry attempts; constant backoff
	// uses Min only.
	Min, Max time.Duration
	// Attempts is the number of tries for WaitRetry (>= 1).
	Attempts int
	// PollInterval is the fallback poll while waiting for a release
	// notification; 0 means the backend's default.
	PollInterval time.Duration
}

// Rule governs the keys that match Pattern.
type Rule struct {
	// Pattern is the key pattern, e.g. "lock:quota:{merchant_id}"; empty for
	// Policy.Defaults.
	Pattern string
	// Mode applies to the timeout and TTL rules of this pattern.
	Mode Mode
	// TTL is the lease TTL when the caller does not choose one.
	TTL time.Duration
	// MinTTL and MaxTTL bound a caller-chosen TTL.
	MinTTL, MaxTTL time.Duration
	// MaxHold bounds how long a lease may be renewed; 0 is unlimited.
	MaxHold time.Duration
	Wait    Wait
}

// Policy is the complete set of governance rules.
type Policy struct {
	// Defaults governs keys that match no declared pattern.
	Defaults Rule
	// Patterns are tried in order; the first match wins.
	Patterns []Rule
	Skew     SkewTiers
	// MaxPatterns caps the distinct labels the normaliser may create; keys
	// past it are labelled "other".
	MaxPatterns int
}

// OtherLabel is the label of keys whose normalised form arrived after the
// MaxPatterns cap was reached (and of keys that are not valid UTF-8).
const OtherLabel = "other"

// Default returns the policy used when none is configured.
func Default() *Policy {
	return &Policy{
		Defaults: Rule{
			Mode:    ModeEnforce,
			TTL:     30 * time.Second,
			MinTTL:  10 * time.Millisecond,
			MaxTTL:  10 * time.Minute,
			MaxHold: 0,
			Wait: Wait{
				Strategy: WaitDeadline,
				Backoff:  BackoffExponential,
				Min:      10 * time.Millisecond,
				Max:      time.Second,
				Attempts: 5,
			},
		},
		Skew: SkewTiers{
			Degrade:          DefaultSkewDegrade,
			Reject:           DefaultSkewReject,
			DegradeTTLFactor: DefaultSkewDegradeTTLFactor,
		},
		MaxPatterns: 200,
	}
}

// ErrInvalid is wrapped by every error from Validate, Parse and Load that
// is about the policy's content.
var ErrInvalid = errors.New("invalid policy")

// Error is one problem in a policy. Parse and Load fill File and Line;
// Validate leaves them empty.
type Error struct {
	File    string
	Line    int
	Field   string // dotted path, e.g. "patterns[0].wait.attempts"
	Problem string
}

// Error formats e as FILE:LINE: FIELD: PROBLEM, omitting what is unknown.
func (e *Error) Error() string {
	var b []byte
	if e.File != "" {
		b = append(b, e.File...)
		if e.Line > 0 {
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(e.Line), 10)
		}
		b = append(b, ": "...)
	}
	if e.Field != "" {
		b = append(b, e.Field...)
		b = append(b, ": "...)
	}
	b = append(b, e.Problem...)
	return string(b)
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// Validate reports every problem in p, one *Error per problem, joined with
// errors.Join. Rules built in Go are taken as complete: a zero TTL is an
// error, not "inherit" (start from Default().Defaults to inherit).
func (p *Policy) Validate() error {
	return joinErrors(p.validate(nil))
}

func joinErrors(es []*Error) error {
	if len(es) == 0 {
		return nil
	}
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// validate returns the problems of p. explicit reports whether a field path
// was written by the user; Parse passes it so that a conflict between an
// inherited and an explicit value is reported at the explicit one. nil
// means every field is explicit.
func (p *Policy) validate(explicit func(path string) bool) []*Error {
	if explicit == nil {
		explicit = func(string) bool { return true }
	}
	var v validator
	v.explicit = explicit
	if p.Defaults.Pattern != "" {
		v.add("defaults.pattern", "must be empty (defaults match every key)")
	}
	v.rule(p.Defaults, "defaults")
	seen := make(map[string]int, len(p.Patterns))
	for i, r := range p.Patterns {
		path := "patterns[" + strconv.Itoa(i) + "]"
		if r.Pattern == "" {
			v.add(path+".pattern", "must not be empty")
		} else if _, err := compilePattern(r.Pattern); err != nil {
			v.add(path+".pattern", fmt.Sprintf("%q: %v", r.Pattern, err))
		} else if j, dup := seen[r.Pattern]; dup {
			v.add(path+".pattern", fmt.Sprintf("%q duplicates patterns[%d]", r.Pattern, j))
		} else {
			seen[r.Pattern] = i
		}
		v.rule(r, path)
	}
	s := p.Skew
	if s.Degrade <= 0 {
		v.add("skew.degrade", fmt.Sprintf("%q must be > 0", s.Degrade))
	}
	if s.Reject <= s.Degrade {
		v.add(v.pick("skew.reject", "skew.degrade"),
			fmt.Sprintf("degrade %q must be < reject %q", s.Degrade, s.Reject))
	}
	if !(s.DegradeTTLFactor > 0 && s.DegradeTTLFactor <= 1) {
		v.add("skew.degrade_ttl_factor", fmt.Sprintf("%v must be in (0, 1]", s.DegradeTTLFactor))
	}
	if p.MaxPatterns < 1 {
		v.add("max_patterns", fmt.Sprintf("%d must be >= 1", p.MaxPatterns))
	}
	return v.errs
}

type validator struct {
	explicit func(string) bool
	errs     []*Error
}

func (v *validator) add(field, problem string) {
	v.errs = append(v.errs, &Error{Field: field, Problem: problem})
}

// pick returns the field a conflict between a and b is reported at: a,
// unless only b was written by the user.
func (v *validator) pick(a, b string) string {
	if !v.explicit(a) && v.explicit(b) {
		return b
	}
	return a
}

func (v *validator) rule(r Rule, path string) {
	f := func(name string) string { return path + "." + name }
	if r.Mode > ModeOff {
		v.add(f("mode"), "unknown mode "+r.Mode.String())
	}
	if r.TTL <= 0 {
		v.add(f("ttl"), fmt.Sprintf("%q must be > 0", r.TTL))
	}
	if r.MinTTL < 0 {
		v.add(f("min_ttl"), fmt.Sprintf("%q must be >= 0", r.MinTTL))
	}
	if r.MaxTTL <= 0 {
		v.add(f("max_ttl"), fmt.Sprintf("%q must be > 0", r.MaxTTL))
	}
	if r.TTL > 0 && r.MinTTL > r.TTL {
		v.add(v.pick(f("ttl"), f("min_ttl")),
			fmt.Sprintf("min_ttl %q must be <= ttl %q", r.MinTTL, r.TTL))
	}
	if r.TTL > 0 && r.MaxTTL > 0 && r.TTL > r.MaxTTL {
		v.add(v.pick(f("ttl"), f("max_ttl")),
			fmt.Sprintf("ttl %q must be <= max_ttl %q", r.TTL, r.MaxTTL))
	}
	if r.MaxHold < 0 {
		v.add(f("max_hold"), fmt.Sprintf("%q must be >= 0 (0 is unlimited)", r.MaxHold))
	}
	w := r.Wait
	if w.Strategy > WaitRetry {
		v.add(f("wait.strategy"), "unknown strategy "+w.Strategy.String())
	}
	if w.Backoff > BackoffConstant {
		v.add(f("wait.backoff"), "unknown backoff "+w.Backoff.String())
	}
	if w.Min < 0 {
		v.add(f("wait.min"), fmt.Sprintf("%q must be >= 0", w.Min))
	}
	if w.Max < 0 {
		v.add(f("wait.max"), fmt.Sprintf("%q must be >= 0", w.Max))
	}
	if w.PollInterval < 0 {
		v.add(f("wait.poll_interval"), fmt.Sprintf("%q must be >= 0 (0 is the backend default)", w.PollInterval))
	}
	if w.Attempts < 0 || (w.Strategy == WaitRetry && w.Attempts < 1) {
		v.add(f("wait.attempts"), fmt.Sprintf("%d must be >= 1 for strategy retry", w.Attempts))
	}
	if w.Strategy == WaitRetry && w.Min <= 0 {
		// A zero pause turns retry into a busy loop against the backend.
		v.add(f("wait.min"), fmt.Sprintf("%q must be > 0 for strategy retry", w.Min))
	}
	// Constant backoff ignores Max, so an inherited Max below an explicit
	// constant Min is not a conflict.
	if w.Backoff == BackoffExponential && w.Min > 0 && w.Max >= 0 && w.Min > w.Max {
		v.add(v.pick(f("wait.min"), f("wait.max")),
			fmt.Sprintf("backoff min %q must be <= max %q", w.Min, w.Max))
	}
}
