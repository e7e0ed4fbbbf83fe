package policy

// Normalize replaces the id-like segments of key with "{id}" so that keys
// that differ only by an id share one label.
//
// Segments are split on ':' '/' '.' '#' '|' '=' and on the braces of a hash
// tag. A segment is id-like when it is all digits, a UUID (with or without
// dashes), a hex string of at least 8 characters containing a digit, or an
// alphanumeric token of at least 16 characters mixing letters and digits.
// The content of a hash tag is a segment too: "lock:quota:{42}" becomes
// "lock:quota:{id}". Normalize is idempotent and returns key itself, without
// allocating, when nothing is replaced.
func Normalize(key string) string {
	var buf [256]byte
	b, changed := appendNormalized(buf[:0], key)
	if !changed {
		return key
	}
	return string(b)
}

// appendNormalized appends the normalised form of key to dst. When no
// segment is id-like it appends nothing and reports false.
func appendNormalized(dst []byte, key string) ([]byte, bool) {
	changed := false
	written := 0 // key[:written] has been copied to dst
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) && !isSeparator(key[i]) {
			continue
		}
		if i > start && idLike(key[start:i]) {
			changed = true
			dst = append(dst, key[written:start]...)
			if start > 0 && key[start-1] == '{' && i < len(key) && key[i] == '}' {
				dst = append(dst, "id"...)
			} else {
				dst = append(dst, "{id}"...)
			}
			written = i
		}
		start = i + 1
	}
	if !changed {
		return dst, false
	}
	return append(dst, key[written:]...), true
}

func isSeparator(c byte) bool {
	switch c {
	case ':', '/', '.', '#', '|', '=', '{', '}':
		return true
	}
	return false
}

func idLike(s string) bool {
	allDigits, allHex, alnum := true, true, true
	hasDigit, hasLetter := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			hasDigit = true
		case 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
			hasLetter = true
			allDigits = false
		case 'g' <= c && c <= 'z', 'G' <= c && c <= 'Z':
			hasLetter = true
			allDigits, allHex = false, false
		default:
			allDigits, allHex, alnum = false, false, false
		}
	}
	switch {
	case allDigits:
		return true
	case allHex && (len(s) == 32 || len(s) >= 8 && hasDigit):
		return true
	case alnum && len(s) >= 16 && hasDigit && hasLetter:
		return true
	}
	return len(s) == 36 && isDashedUUID(s)
}

// isDashedUUID reports whether s is 8-4-4-4-12 hex digits.
func isDashedUUID(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
