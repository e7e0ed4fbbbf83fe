package policy

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Matcher maps raw keys to bounded labels and the Rule that governs them.
// It is safe for concurrent use.
//
// It keeps no per-key state: memory is bounded by the declared patterns and
// MaxPatterns labels however many distinct keys pass through it.
type Matcher struct {
	policy   *Policy
	patterns []compiledRule
	labels   labelSet
}

type compiledRule struct {
	pattern
	rule *Rule
}

// NewMatcher returns a Matcher for p, which must not be modified afterwards
// (Match returns pointers into it). p should have passed Validate: a
// pattern that does not compile never matches. A nil p means Default().
func NewMatcher(p *Policy) *Matcher {
	if p == nil {
		p = Default()
	}
	m := &Matcher{policy: p}
	for i := range p.Patterns {
		r := &p.Patterns[i]
		cp, err := compilePattern(r.Pattern)
		if err != nil || r.Pattern == "" {
			continue
		}
		m.patterns = append(m.patterns, compiledRule{pattern: cp, rule: r})
	}
	m.labels.max = p.MaxPatterns
	if m.labels.max < 1 {
		m.labels.max = Default().MaxPatterns
	}
	empty := map[string]string{}
	m.labels.read.Store(&empty)
	return m
}

// Match returns the label for key and the Rule that governs it.
//
// The label is the first declared pattern that matches key, else
// Normalize(key), else "other" when that normalised form is new and
// MaxPatterns normalised labels already exist (or key is not valid UTF-8,
// which no metrics backend accepts as a label value). A label seen before
// the cap stays itself after it. The Rule is the declared pattern's, else
// &p.Defaults.
func (m *Matcher) Match(key string) (label string, rule *Rule) {
	for i := range m.patterns {
		if m.patterns[i].match(key) {
			return m.patterns[i].rule.Pattern, m.patterns[i].rule
		}
	}
	rule = &m.policy.Defaults
	var buf [256]byte
	b, changed := appendNormalized(buf[:0], key)
	read := *m.labels.read.Load()
	if !changed {
		if l, ok := read[key]; ok {
			return l, rule
		}
		if m.labels.full.Load() {
			return OtherLabel, rule
		}
		return m.labels.intern(key), rule
	}
	if l, ok := read[string(b)]; ok { // no allocation: map index by string(bytes)
		return l, rule
	}
	if m.labels.full.Load() {
		return OtherLabel, rule
	}
	return m.labels.intern(string(b)), rule
}

// labelSet is the set of normalised labels, capped at max. Reads go to an
// immutable map behind an atomic pointer, so the hot path takes no lock and
// does not allocate; inserts go to dirty under mu, and dirty is copied into
// read once enough lookups have missed read to pay for the copy.
type labelSet struct {
	read   atomic.Pointer[map[string]string]
	full   atomic.Bool // read holds max labels; a read miss means "other"
	max    int
	mu     sync.Mutex
	dirty  map[string]string // every label; a superset of read
	misses int
}

func (s *labelSet) intern(label string) string {
	if !utf8.ValidString(label) {
		return OtherLabel
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := (*s.read.Load())[label]; ok {
		return l
	}
	if s.dirty == nil {
		s.dirty = make(map[string]string)
	}
	l, ok := s.dirty[label]
	if !ok {
		if len(s.dirty) >= s.max {
			return OtherLabel
		}
		// The caller's key may be large or short-lived; keep a copy of
		// just the label.
		l = strings.Clone(label)
		s.dirty[l] = l
	}
	s.misses++
	full := len(s.dirty) >= s.max
	if full || s.misses >= len(s.dirty) {
		r := maps.Clone(s.dirty)
		s.read.Store(&r)
		s.misses = 0
		// Once full, read is complete and stays so: a miss is "other".
		s.full.Store(full)
	}
	return l
}
