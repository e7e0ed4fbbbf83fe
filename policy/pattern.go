package policy

import (
	"errors"
	"strings"
)

// pattern is a compiled key pattern: prefix, then for each placeholder the
// literal that follows it. Literals between placeholders are never empty
// (adjacent placeholders are rejected), so matching needs no lookahead
// beyond the next literal.
type pattern struct {
	prefix string
	tail   []string // tail[i] follows placeholder i; the last may be ""
}

func compilePattern(s string) (pattern, error) {
	var p pattern
	var lit strings.Builder
	first := true
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '}':
			return pattern{}, errors.New("unbalanced braces: '}' without '{'")
		case '{':
			end := strings.IndexAny(s[i+1:], "{}")
			if end < 0 || s[i+1+end] == '{' {
				return pattern{}, errors.New("unbalanced braces: '{' without '}'")
			}
			if end == 0 {
				return pattern{}, errors.New("empty placeholder name {}")
			}
			if !first && lit.Len() == 0 {
				return pattern{}, errors.New("adjacent placeholders (separate them with a literal)")
			}
			if first {
				p.prefix = lit.String()
				first = false
			} else {
				p.tail[len(p.tail)-1] = lit.String()
			}
			lit.Reset()
			p.tail = append(p.tail, "")
			i += end + 1
		default:
			lit.WriteByte(s[i])
		}
	}
	if first {
		p.prefix = lit.String()
	} else {
		p.tail[len(p.tail)-1] = lit.String()
	}
	return p, nil
}

// match reports whether key matches p. A placeholder matches one or more
// bytes other than ':', except a placeholder that ends the pattern, which
// matches one or more of any byte.
func (p *pattern) match(key string) bool {
	if !strings.HasPrefix(key, p.prefix) {
		return false
	}
	rest := key[len(p.prefix):]
	if len(p.tail) == 0 {
		return rest == ""
	}
	return matchTail(p.tail, rest)
}

func matchTail(tail []string, s string) bool {
	lit := tail[0]
	if len(tail) == 1 && lit == "" {
		return s != ""
	}
	// The placeholder may not cross ':', so it ends at or before the first
	// ':' in s.
	limit := strings.IndexByte(s, ':')
	if limit < 0 {
		limit = len(s)
	}
	for j := 1; j <= limit && j+len(lit) <= len(s); j++ {
		if !strings.HasPrefix(s[j:], lit) {
			continue
		}
		if len(tail) == 1 {
			if j+len(lit) == len(s) {
				return true
			}
			continue
		}
		if matchTail(tail[1:], s[j+len(lit):]) {
			return true
		}
	}
	return false
}
