package snowflake

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzLayoutDecode holds that Layout.Decode never panics, refuses with
// ErrInvalid and a message naming the layout or the id, and that what it
// accepts composes back to the same id: time, worker and sequence in range,
// (ms << (worker+sequence bits)) | worker << sequence bits | sequence == id,
// and Time - epoch == ms.
func FuzzLayoutDecode(f *testing.F) {
	epoch := DefaultEpoch.UnixMilli()
	f.Add(41, 10, 12, 0, epoch, int64(1)<<22|5<<12|7)
	f.Add(42, 8, 13, 0, epoch, int64(MaxSafeInteger)+1)
	f.Add(41, 5, 7, 53, epoch, int64(MaxSafeInteger))
	f.Add(41, 5, 7, 53, epoch, int64(MaxSafeInteger)+1)
	f.Add(31, 20, 12, 0, epoch, int64(1))
	f.Add(62, 0, 1, 0, int64(-1)<<40, int64(-1))
	f.Add(41, -1, 23, 0, epoch, int64(0))
	f.Add(100, -30, -7, 63, epoch, int64(1)<<62)
	f.Fuzz(func(t *testing.T, tb, wb, sb, bits int, epochMs, id int64) {
		l := Layout{TimeBits: tb, WorkerBits: wb, SequenceBits: sb, Bits: bits}
		// Epochs within ±300 years of 1970: Time arithmetic stays exact.
		const span = 300 * 365 * 24 * int64(time.Hour/time.Millisecond)
		epochMs %= span
		ep := time.UnixMilli(epochMs)
		p, err := l.Decode(ep, id)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), l.String()) {
				t.Fatalf("Decode error %q does not name the layout %s", err, l)
			}
			if l.Validate() == nil && !strings.Contains(err.Error(), strconv.FormatInt(id, 10)) {
				t.Fatalf("Decode error %q does not name the id %d", err, id)
			}
			return
		}
		if l.Validate() != nil {
			t.Fatalf("Decode accepted invalid layout %+v", l)
		}
		if p.ID != id || p.Worker < 0 || p.Worker > l.MaxWorker() || p.Sequence < 0 || p.Sequence > l.MaxSequence() {
			t.Fatalf("Decode(%d) with %s = %+v: a part out of range", id, l, p)
		}
		ms := p.Time.UnixMilli() - epochMs
		if ms < 0 || ms >= int64(1)<<l.TimeBits {
			t.Fatalf("Decode(%d) with %s: %d ms after the epoch, outside %d time bits", id, l, ms, l.TimeBits)
		}
		if back := ms<<(l.WorkerBits+l.SequenceBits) | p.Worker<<l.SequenceBits | p.Sequence; back != id {
			t.Fatalf("Decode(%d) with %s = %+v composes back to %d", id, l, p, back)
		}
		if p.Time.Location() != time.UTC {
			t.Fatalf("Decode returned a time in %v, want UTC", p.Time.Location())
		}
	})
}

// FuzzIDText holds that an ID's JSON and text forms parse back to the same
// ID, that what UnmarshalJSON and UnmarshalText accept they write back the
// same way (up to the quotes and a leading '+' or zeros), and that a
// refusal names the input.
func FuzzIDText(f *testing.F) {
	for _, s := range []string{`"1234"`, `1234`, `"-1"`, `"9223372036854775808"`, `""`, `"`, `null`, `"+7"`, `"0x10"`, `1e3`, `"12`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var id ID
		if err := id.UnmarshalJSON(b); err != nil {
			if !strings.Contains(err.Error(), string(b)) || !strings.Contains(err.Error(), "snowflake: ID") {
				t.Fatalf("UnmarshalJSON(%q) error %q does not name the input", b, err)
			}
		} else {
			out, _ := id.MarshalJSON()
			var back ID
			if err := json.Unmarshal(out, &back); err != nil || back != id {
				t.Fatalf("ID %d: JSON %s reads back as %d, %v", id, out, back, err)
			}
			want, _ := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
			if int64(id) != want {
				t.Fatalf("UnmarshalJSON(%q) = %d, want %d", b, id, want)
			}
		}
		var tid ID
		if err := tid.UnmarshalText(b); err == nil {
			txt, _ := tid.MarshalText()
			var back ID
			if err := back.UnmarshalText(txt); err != nil || back != tid || tid.String() != string(txt) {
				t.Fatalf("ID %d: text %q reads back as %d, %v", tid, txt, back, err)
			}
		}
	})
}
