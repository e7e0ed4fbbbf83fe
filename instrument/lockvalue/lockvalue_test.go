package lockvalue

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDecode_ReadsBackWhatTheWriterWrote(t *testing.T) {
	w, err := NewWriter("billing", "pod-3")
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.UnixMilli(1764590000012)
	var b strings.Builder
	w.Begin(&b, Call{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Labels: map[string]string{"order": "o-1"}, TTL: 30 * time.Second})
	AppendTime(&b, QueuedAt, acquired.Add(-5*time.Millisecond))
	AppendTime(&b, AcquiredAt, acquired)
	b.WriteString(FenceMember + "1764590000012345}")

	h, err := Decode([]byte(b.String()))
	if err != nil {
		t.Fatalf("Decode(%s): %v", b.String(), err)
	}
	if h.Service != "billing" || h.Instance != "pod-3" || h.PID == 0 || h.Host == "" || h.Version == "" {
		t.Errorf("process metadata: %+v", h)
	}
	if h.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || h.Labels["order"] != "o-1" || h.TTL != 30*time.Second {
		t.Errorf("call metadata: %+v", h)
	}
	if !h.AcquiredAt.Equal(acquired) || !h.QueuedAt.Equal(acquired.Add(-5*time.Millisecond)) || h.Fence != 1764590000012345 {
		t.Errorf("backend members: %+v", h)
	}
	if h.Foreign {
		t.Error("a lockgov value decoded as foreign")
	}
}

func TestBegin_EscapesWhatJSONNeedsEscaped(t *testing.T) {
	w, err := NewWriter(`svc "quoted"`, "inst\\1")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	w.Begin(&b, Call{TraceID: "a\"b\x01", Labels: map[string]string{`k"`: "v\n"}})
	b.WriteByte('}')
	h, err := Decode([]byte(b.String()))
	if err != nil {
		t.Fatalf("Decode(%s): %v", b.String(), err)
	}
	if h.Service != `svc "quoted"` || h.Instance != "inst\\1" || h.TraceID != "a\"b\x01" || h.Labels[`k"`] != "v\n" {
		t.Errorf("round trip: %+v", h)
	}
}

func TestDecode_RefusesWhatIsNotALockValue(t *testing.T) {
	for _, v := range []string{
		"",
		"x7Qf3bRk2V9pLq0sYt1uWw",                // a bare token (redsync, bsm/redislock without metadata)
		"x7Qf3bRk2V9pLq0sYt1uWw{\"order\":1}",   // bsm/redislock token + metadata
		`{"order":"o-1"}`,                       // someone else's JSON
		`{"service":"a","pid":1,"fence":"x"}`,   // a fence that is not a number
		`{"service":"a","pid":1,"fence":-1}`,    // nor negative
		`{"service":"a","pid":1,"fence":1e400}`, // nor out of range
		`{"service":"a","pid":"one"}`,           // wrong types
		`{"service":"a","pid":1`,                // cut off
		"[1,2,3]",
	} {
		if h, err := Decode([]byte(v)); !errors.Is(err, ErrNotLockValue) {
			t.Errorf("Decode(%q) = %+v, %v; want ErrNotLockValue", v, h, err)
		}
	}
}

func TestDecode_BoundsWhatItKeeps(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"service":"` + strings.Repeat("s", 10*MaxString) + `","pid":1,"labels":{`)
	for i := range 10 * MaxLabels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `":"v"`)
	}
	b.WriteString(`}}`)
	h, err := Decode([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Service) != MaxString || len(h.Labels) != MaxLabels {
		t.Errorf("kept a %d-byte service and %d labels; want %d and %d", len(h.Service), len(h.Labels), MaxString, MaxLabels)
	}
	for k := range h.Labels {
		if len(k) > MaxString {
			t.Errorf("kept a %d-byte label name", len(k))
		}
	}
}

func TestWriter_ZeroValueStillWritesAValue(t *testing.T) {
	var b strings.Builder
	Writer{}.Begin(&b, Call{TTL: time.Second})
	b.WriteByte('}')
	h, err := Decode([]byte(b.String()))
	if err != nil || h.PID != os.Getpid() || h.TTL != time.Second {
		t.Fatalf("zero Writer wrote %s: %+v, %v", b.String(), h, err)
	}
}

func TestVersion_IsNeverEmpty(t *testing.T) {
	if Version() == "" {
		t.Fatal("empty version")
	}
}

// FuzzDecode holds that Decode never panics, never keeps more than its
// bounds, and that what it accepts it would write back the same way.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"service":"billing","instance":"pod-3","host":"n","pid":4242,"v":"v0.1.0","trace_id":"4bf9","labels":{"a":"b"},"ttl_ms":30000,"queued_at_ms":1,"acquired_at_ms":2,"fence":3}`,
		`{"pid":1}`,
		`x7Qf3bRk2V9pLq0sYt1uWw`,
		`{"service":"a","pid":1,"fence":18446744073709551615}`,
		`{"service":"a","pid":1,"labels":{"":""}}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrNotLockValue) {
				t.Fatalf("Decode error %v does not wrap ErrNotLockValue", err)
			}
			return
		}
		if len(h.Labels) > MaxLabels || len(h.Service) > MaxString || len(h.Instance) > MaxString ||
			len(h.TraceID) > MaxString || len(h.Host) > MaxString || len(h.Version) > MaxString {
			t.Fatalf("Decode kept more than its bounds: %+v", h)
		}
		if h.TTL < 0 || h.Foreign {
			t.Fatalf("Decode produced %+v", h)
		}
	})
}

// A builder grown by Size never grows again while the value is written:
// every acquire would otherwise copy its value into a second buffer.
func TestSize_CoversWhatBeginAndAppendTimeWrite(t *testing.T) {
	named, err := NewWriter("billing", "pod-3")
	if err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(1764590000012)
	for _, tc := range []struct {
		name  string
		w     Writer
		c     Call
		times int
	}{
		{"zero writer, nothing else", Writer{}, Call{}, 0},
		{"zero writer, one time", Writer{}, Call{TTL: time.Second}, 1},
		{"trace and ttl, one time", named, Call{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", TTL: 30 * time.Second}, 1},
		{"everything, two times", named, Call{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Labels: map[string]string{"order": "o-1", "tenant": "t"}, TTL: time.Hour}, 2},
		{"longest ttl", named, Call{TTL: time.Duration(1<<63 - 1)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			b.Grow(tc.w.Size(tc.c, tc.times))
			grown := b.Cap()
			tc.w.Begin(&b, tc.c)
			for range tc.times {
				AppendTime(&b, AcquiredAt, at)
			}
			if b.Len() > tc.w.Size(tc.c, tc.times) {
				t.Errorf("Size %d, below the %d bytes written", tc.w.Size(tc.c, tc.times), b.Len())
			}
			if b.Cap() != grown {
				t.Errorf("Size %d, wrote %d bytes: the builder grew from %d to %d", tc.w.Size(tc.c, tc.times), b.Len(), grown, b.Cap())
			}
			if slack := tc.w.Size(tc.c, tc.times) - b.Len(); slack > 64 {
				t.Errorf("Size %d for %d bytes: %d bytes of slack on every acquire", tc.w.Size(tc.c, tc.times), b.Len(), slack)
			}
		})
	}
}
