// Package shellquote quotes strings for a POSIX shell the way lockgov's
// outputs write them: the actions in findings (detectors), and the cells of
// `lockgov locks` tables. One form for both, so that what an operator copies
// from either means the same bytes.
package shellquote

import (
	"strings"
)

// Quote quotes s for a POSIX shell: as it is when it needs no quoting,
// in single quotes when every byte is printable ASCII, and in ANSI-C form
// ($'…', see ANSIC) when s holds bytes a terminal would not show (etcd
// queue keys contain a NUL; other applications' keys need not be UTF-8).
func Quote(s string) string {
	plain := s != ""
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_./:,=@%+", c) >= 0) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return ANSIC(s)
		}
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ANSIC writes s in a shell's ANSI-C quoting, $'…': a backslash and a single
// quote escaped with a backslash, every byte outside printable ASCII as
// \xNN (the agent console's form), the rest as it is. bash, zsh and ksh
// read it back to the same bytes, a NUL excepted (a shell argument ends
// there).
func ANSIC(s string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 3)
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			b.WriteString(`\x`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}
