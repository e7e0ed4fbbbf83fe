package snowflake

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLayoutValidate_RefusesBadWidths(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Layout
		want string
	}{
		{"sum 62", Layout{TimeBits: 41, WorkerBits: 10, SequenceBits: 11}, "sum to 62, want 63"},
		{"sum 64", Layout{TimeBits: 41, WorkerBits: 11, SequenceBits: 12}, "sum to 64, want 63"},
		{"js sum 63", Layout{TimeBits: 41, WorkerBits: 10, SequenceBits: 12, Bits: 53}, "sum to 63, want 53"},
		{"bits 64", Layout{TimeBits: 41, WorkerBits: 11, SequenceBits: 12, Bits: 64}, "want 63 or 53"},
		{"short lifetime", Layout{TimeBits: 20, WorkerBits: 21, SequenceBits: 22}, "at least 32"},
		{"no sequence", Layout{TimeBits: 53, WorkerBits: 10, SequenceBits: 0}, "sequence bits >= 1"},
		{"negative worker", Layout{TimeBits: 52, WorkerBits: -1, SequenceBits: 12}, "worker bits must be >= 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate(%v) = %v, want ErrInvalid containing %q", tc.l, err, tc.want)
			}
			if _, err := New(0, WithLayout(tc.l)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("New with %v = %v, want ErrInvalid", tc.l, err)
			}
		})
	}
	for _, l := range []Layout{Layout41x10x12, Layout8x13, LayoutJSSafe} {
		if err := l.Validate(); err != nil {
			t.Errorf("preset %v: %v", l, err)
		}
	}
}

func TestLayoutJSSafe_StaysWithinMaxSafeIntegerForItsLifetime(t *testing.T) {
	l := LayoutJSSafe
	if l.MaxID() > MaxSafeInteger {
		t.Fatalf("MaxID %d > 2^53-1", l.MaxID())
	}
	// The largest ID it can compose: last millisecond, last worker, last sequence.
	last := (int64(1)<<l.TimeBits-1)<<(l.WorkerBits+l.SequenceBits) | l.MaxWorker()<<l.SequenceBits | l.MaxSequence()
	if last != l.MaxID() || float64(last) != float64(last-1)+1 {
		t.Fatalf("largest ID %d is not exactly representable as a float64", last)
	}
	if got := l.End(DefaultEpoch); got.Year() != 2093 {
		t.Fatalf("End = %s, want 2093 (69 years)", got)
	}
}

func TestLayoutLifetime(t *testing.T) {
	if got, want := DefaultLayout.End(DefaultEpoch), time.Date(2093, 9, 6, 15, 47, 35, 552e6, time.UTC); !got.Equal(want) {
		t.Fatalf("End = %s, want %s", got, want)
	}
	if got := Layout8x13.Lifetime(); got < 139*365*24*time.Hour {
		t.Fatalf("8x13 lifetime %s, want ~139 years", got)
	}
}

func TestDecode_RoundTrips(t *testing.T) {
	ts := DefaultEpoch.Add(123456789 * time.Millisecond)
	id := int64(123456789)<<22 | 513<<12 | 4095
	p, err := Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Time.Equal(ts) || p.Worker != 513 || p.Sequence != 4095 || p.ID != id {
		t.Fatalf("Decode = %+v", p)
	}
	if _, err := Decode(-1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Decode(-1) = %v, want ErrInvalid", err)
	}
	if _, err := LayoutJSSafe.Decode(DefaultEpoch, MaxSafeInteger+1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Decode beyond 2^53-1 = %v, want ErrInvalid", err)
	}
}

func TestID_JSONIsAString(t *testing.T) {
	type user struct {
		ID ID `json:"id"`
	}
	b, err := json.Marshal(user{ID: 1<<62 + 1})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"id":"4611686018427387905"}` {
		t.Fatalf("got %s", b)
	}
	var u user
	if err := json.Unmarshal(b, &u); err != nil || u.ID != 1<<62+1 {
		t.Fatalf("unmarshal string: %v %v", u.ID, err)
	}
	if err := json.Unmarshal([]byte(`{"id":42}`), &u); err != nil || u.ID != 42 {
		t.Fatalf("unmarshal number: %v %v", u.ID, err)
	}
	if err := json.Unmarshal([]byte(`{"id":"x"}`), &u); err == nil {
		t.Fatal("unmarshal of a non-number succeeded")
	}
}
