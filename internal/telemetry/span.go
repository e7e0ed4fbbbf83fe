package telemetry

import (
	"errors"
	"strconv"
	"strings"
)

// Keyless is err as a span records it (span.RecordError copies the message
// into the exception.message event attribute): lockgov's errors name the
// key, quoted (%q), for the caller, and spans carry the key's pattern, never
// the raw key. The quoted key becomes <key>; the rest of the message stays.
func Keyless(err error, key string) error {
	return errors.New(strings.ReplaceAll(err.Error(), strconv.Quote(key), "<key>"))
}
