package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/snowflake"
)

// FuzzIDDecodeCLI runs `lockgov id decode --layout L --epoch E -- ID` and
// holds that a refusal is a usage error (exit status 2) naming what is
// wrong, and that an accepted ID's printed time, worker and sequence
// compose back to the ID under the printed layout.
func FuzzIDDecodeCLI(f *testing.F) {
	f.Add("default", "2024-01-01T00:00:00Z", "4194304")
	f.Add("41/10/12", "2024-01-01T00:00:00Z", "9223372036854775807")
	f.Add("jssafe", "2010-11-04T01:42:54.657Z", "9007199254740992")
	f.Add("8x13", "1970-01-01T00:00:00+05:30", "0")
	f.Add("41/5/7", "2024-01-01T00:00:00.000999Z", "12345678")
	f.Add("41/10/11", "2024-01-01T00:00:00Z", "1")
	f.Add("a/b/c", "yesterday", "-5")
	f.Add("+41/010/12", "2024-01-01T00:00:00Z", "+17")
	f.Add("41/10/12", "2024-01-01T00:00:00Z", "0x10")
	f.Fuzz(func(t *testing.T, layout, epoch, id string) {
		var out bytes.Buffer
		err := idCmd([]string{"decode", "--layout", layout, "--epoch", epoch, "--", id}, &out)
		if err != nil {
			var ue UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("refusal %v is not a usage error", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "layout") && !strings.Contains(msg, "RFC 3339") &&
				!strings.Contains(msg, strconv.Quote(id)) && !strings.Contains(msg, "id "+id) {
				t.Fatalf("refusal %q names neither the layout, the epoch nor the id %q", msg, id)
			}
			return
		}
		want, perr := strconv.ParseInt(id, 10, 64)
		if perr != nil {
			t.Fatalf("decode accepted %q, which is not a decimal int64", id)
		}
		var gotID, worker, seq int64
		var ts, lay string
		line := strings.TrimSpace(out.String())
		if _, err := fmt.Sscanf(line, "id=%d time=%s worker=%d sequence=%d layout=%s", &gotID, &ts, &worker, &seq, &lay); err != nil {
			t.Fatalf("decode printed %q: %v", line, err)
		}
		l, err := parseLayout(lay)
		if err != nil {
			t.Fatalf("printed layout %q does not parse: %v", lay, err)
		}
		ep, _ := time.Parse(time.RFC3339Nano, epoch)
		at, err := time.Parse("2006-01-02T15:04:05.000Z07:00", ts)
		if err != nil {
			t.Fatalf("printed time %q does not parse: %v", ts, err)
		}
		ms := at.UnixMilli() - ep.UnixMilli()
		back := ms<<(l.WorkerBits+l.SequenceBits) | worker<<l.SequenceBits | seq
		if gotID != want || back != want {
			t.Fatalf("decode %q printed %q: composes back to %d, want %d", id, line, back, want)
		}
	})
}

// FuzzParseLayout holds that --layout either refuses with a message naming
// the text given or gives a valid layout that reads back the same from its
// own String form (parse(format(l)) == l).
func FuzzParseLayout(f *testing.F) {
	for _, s := range []string{"default", "8x13", "jssafe", "JS", "41/10/12", "42/8/13", "41/5/7", "41/10", "41/10/11", "a/b/c", "-1/32/32", "63/0/0", "//", "41/10/12/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseLayout(s)
		if err != nil {
			if !errors.Is(err, snowflake.ErrInvalid) && !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("parseLayout(%q) error %q does not name the input", s, err)
			}
			if errors.Is(err, snowflake.ErrInvalid) && !strings.Contains(err.Error(), l.String()) {
				t.Fatalf("parseLayout(%q) error %q does not name the layout %s", s, err, l)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("parseLayout(%q) = %+v, which does not validate: %v", s, l, err)
		}
		again, err := parseLayout(l.String())
		if err != nil || again != l {
			t.Fatalf("parseLayout(%q) = %+v; its String %q reads back as %+v, %v", s, l, l.String(), again, err)
		}
	})
}

// FuzzEpochFlag holds that --epoch shows the epoch it was given: the flag's
// String form, set again, is the same instant.
func FuzzEpochFlag(f *testing.F) {
	for _, s := range []string{"2024-01-01T00:00:00Z", "2024-01-01T00:00:00.5Z", "1999-12-31T23:59:59.999999999+01:00", "yesterday"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var at time.Time
		v := epochValue{&at}
		if err := v.Set(s); err != nil {
			if !strings.Contains(err.Error(), "RFC 3339") {
				t.Fatalf("--epoch %q: error %q does not say what is wanted", s, err)
			}
			return
		}
		var back time.Time
		if err := (epochValue{&back}).Set(v.String()); err != nil || !back.Equal(at) {
			t.Fatalf("--epoch %q shows as %q, which reads back as %v (want %v), %v", s, v.String(), back, at, err)
		}
	})
}
