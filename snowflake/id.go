package snowflake

import (
	"fmt"
	"strconv"
)

// ID is an int64 ID whose JSON form is a string ("1234"), for APIs whose clients parse
// JSON numbers as float64 and would round IDs above 2^53. It unmarshals from a string or a
// number.
type ID int64

// String returns the decimal form.
func (id ID) String() string { return strconv.FormatInt(int64(id), 10) }

// MarshalJSON encodes the ID as a JSON string.
func (id ID) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 22)
	b = append(b, '"')
	b = strconv.AppendInt(b, int64(id), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts "123" and 123.
func (id *ID) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("snowflake: ID %s: %w", b, err)
	}
	*id = ID(v)
	return nil
}

// MarshalText encodes the ID in decimal (map keys, query strings).
func (id ID) MarshalText() ([]byte, error) { return strconv.AppendInt(nil, int64(id), 10), nil }

// UnmarshalText parses a decimal ID.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("snowflake: ID %q: %w", b, err)
	}
	*id = ID(v)
	return nil
}
