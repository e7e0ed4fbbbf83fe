package instrument

import (
	"fmt"
	"unicode/utf8"
)

// MaxKeyLen is the longest lock key accepted, in bytes.
const MaxKeyLen = 512

// ValidateKey is for backend authors: it reports why key cannot be a lock
// key: empty, longer than MaxKeyLen bytes, not UTF-8, or containing control
// characters (which break log lines and terminal output of the agent).
// Backends call it before any round trip, so a bad key never leaves
// anything behind in the store.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); {
		c := key[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return fmt.Errorf("%w: key has control character %#x at byte %d", ErrInvalidKey, c, i)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(key[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Errorf("%w: key is not valid UTF-8 at byte %d", ErrInvalidKey, i)
		}
		if r >= 0x80 && r <= 0x9f {
			return fmt.Errorf("%w: key has control character %U at byte %d", ErrInvalidKey, r, i)
		}
		i += n
	}
	return nil
}
