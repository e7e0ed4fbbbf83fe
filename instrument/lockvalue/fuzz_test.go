package lockvalue

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzWriterRoundTrip holds that Decode reads back exactly what a Writer
// and a backend's appended members wrote, for any service, instance, trace
// id, label, TTL, times and fence (strings within the bounds and valid
// UTF-8, which is what JSON carries).
func FuzzWriterRoundTrip(f *testing.F) {
	f.Add("billing", "pod-3", "4bf92f3577b34da6a3ce929d0e0e4736", "tenant", "acme", int64(30000), int64(1), int64(2), uint64(3))
	f.Add("", "", "", "", "", int64(0), int64(0), int64(0), uint64(0))
	f.Add(`"quoted\"`, "\u2028", "\x01", "k\"", "</script>", int64(1), int64(-5), int64(1)<<50, uint64(1)<<63)
	f.Fuzz(func(t *testing.T, service, instance, trace, lk, lv string, ttlMs, queued, acquired int64, fence uint64) {
		for _, s := range []string{service, instance, trace, lk, lv} {
			if !utf8.ValidString(s) || len(s) > MaxString {
				return
			}
		}
		if service == "" {
			service = "svc" // NewWriter fills an empty one from the executable
		}
		w, err := NewWriter(service, instance)
		if err != nil {
			t.Fatal(err)
		}
		ttl := time.Duration(max(ttlMs, 0)%(1<<40)) * time.Millisecond
		c := Call{TraceID: trace, TTL: ttl}
		if lk != "" {
			c.Labels = map[string]string{lk: lv}
		}
		var b strings.Builder
		w.Begin(&b, c)
		q, a := time.UnixMilli(queued%(1<<45)), time.UnixMilli(acquired%(1<<45))
		AppendTime(&b, QueuedAt, q)
		AppendTime(&b, AcquiredAt, a)
		b.WriteString(FenceMember + strconv.FormatUint(fence, 10) + "}")
		h, err := Decode([]byte(b.String()))
		if err != nil {
			t.Fatalf("Decode(%s): %v", b.String(), err)
		}
		host, _ := os.Hostname()
		if instance == "" {
			instance = host
		}
		if h.Service != service || h.Instance != instance || h.PID != os.Getpid() || h.TraceID != trace ||
			h.TTL != ttl || h.Fence != fence || h.Foreign {
			t.Fatalf("wrote %s, read %+v", b.String(), h)
		}
		if lk != "" && (len(h.Labels) != 1 || h.Labels[lk] != lv) {
			t.Fatalf("wrote label %q=%q, read %v", lk, lv, h.Labels)
		}
		if wantQ := q.UnixMilli() > 0; wantQ != !h.QueuedAt.IsZero() || wantQ && !h.QueuedAt.Equal(q) {
			t.Fatalf("wrote queued_at %v, read %v", q, h.QueuedAt)
		}
		if wantA := a.UnixMilli() > 0; wantA != !h.AcquiredAt.IsZero() || wantA && !h.AcquiredAt.Equal(a) {
			t.Fatalf("wrote acquired_at %v, read %v", a, h.AcquiredAt)
		}
	})
}
