package detectors

import (
	"strings"
)

// DefaultLockPattern is the SCAN pattern used when neither the policy nor
// WithPatterns names any.
const DefaultLockPattern = "lock:*"

type glob struct {
	src    string
	prefix string // literal text before the first special character
	simple bool   // src is prefix + "*"
}

// GlobFromPattern turns a policy key pattern ("lock:quota:{merchant_id}")
// into a Redis SCAN glob ("lock:quota:*"): placeholders become '*', glob
// characters in the literal text are escaped.
func GlobFromPattern(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch c {
		case '{':
			if end := strings.IndexByte(p[i:], '}'); end > 0 {
				b.WriteByte('*')
				i += end
				continue
			}
			b.WriteByte(c)
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// compileGlobs dedupes patterns and drops those another pattern of the
// form "prefix*" already covers, so that a key is scanned once in the
// common case (lock:* and lock:quota:*); coveredBefore handles the rest.
func compileGlobs(patterns []string) []glob {
	if len(patterns) == 0 {
		patterns = []string{DefaultLockPattern}
	}
	var gs []glob
	seen := map[string]bool{}
	for _, p := range patterns {
		if seen[p] {
			continue
		}
		seen[p] = true
		g := glob{src: p}
		g.prefix, g.simple = literalPrefix(p)
		gs = append(gs, g)
	}
	out := gs[:0:0]
	for i, g := range gs {
		covered := false
		for j, h := range gs {
			if i != j && h.simple && strings.HasPrefix(g.prefix, h.prefix) && !(g.simple && g.prefix == h.prefix && j > i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, g)
		}
	}
	return out
}

// literalPrefix returns the unescaped text before the first special
// character of a glob, and whether the glob is exactly that text plus "*".
func literalPrefix(p string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '\\':
			if i+1 < len(p) {
				i++
				b.WriteByte(p[i])
			}
		case '*', '?', '[':
			return b.String(), c == '*' && i == len(p)-1
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), false
}

func coveredBefore(earlier []glob, key string) bool {
	for _, g := range earlier {
		if globMatch(g.src, key) {
			return true
		}
	}
	return false
}

// globMatch matches key against a Redis glob: * ? [...] (with ^ and
// ranges) and backslash escapes.
func globMatch(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			if p == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globMatch(p, s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			p, s = p[1:], s[1:]
		case '[':
			if s == "" {
				return false
			}
			end := strings.IndexByte(p[1:], ']')
			if end < 0 {
				if s[0] != '[' {
					return false
				}
				p, s = p[1:], s[1:]
				continue
			}
			class := p[1 : 1+end]
			neg := strings.HasPrefix(class, "^")
			if neg {
				class = class[1:]
			}
			hit := false
			for i := 0; i < len(class); i++ {
				if i+2 < len(class) && class[i+1] == '-' {
					if class[i] <= s[0] && s[0] <= class[i+2] {
						hit = true
					}
					i += 2
				} else if class[i] == s[0] {
					hit = true
				}
			}
			if hit == neg {
				return false
			}
			p, s = p[2+end:], s[1:]
		case '\\':
			if len(p) > 1 {
				p = p[1:]
			}
			fallthrough
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
			p, s = p[1:], s[1:]
		}
	}
	return s == ""
}
