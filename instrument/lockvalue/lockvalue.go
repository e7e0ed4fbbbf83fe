package lockvalue

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Limits Decode applies to what it keeps from a value it did not write.
const (
	MaxLabels = 32  // labels beyond this are dropped
	MaxString = 256 // longer strings are cut
)

// Holder is what a lock value says about its holder. It never carries the
// owner token.
type Holder struct {
	Service  string            `json:"service,omitempty"`
	Instance string            `json:"instance,omitempty"`
	Host     string            `json:"host,omitempty"`
	PID      int               `json:"pid,omitempty"`
	Version  string            `json:"version,omitempty"` // lockgov version of the writer
	TraceID  string            `json:"trace_id,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// TTL is the lease TTL the holder asked for (0: not recorded).
	TTL time.Duration `json:"ttl,omitempty"`
	// QueuedAt is when the holder started waiting, AcquiredAt when it took
	// the lock, both by the holder's wall clock (zero: not recorded).
	QueuedAt   time.Time `json:"queued_at,omitzero"`
	AcquiredAt time.Time `json:"acquired_at,omitzero"`
	Fence      uint64    `json:"fence,omitempty"`
	// Foreign is true when the value was not written by lockgov (a bare
	// token, another library's value): nothing above is known.
	Foreign bool `json:"foreign,omitempty"`
}

// Foreign is the Holder of a value lockgov did not write.
func Foreign() Holder { return Holder{Foreign: true} }

// wire is the stored form. Times are Unix milliseconds and durations
// milliseconds, so that values stay short and readable in redis-cli.
type wire struct {
	Service    string            `json:"service"`
	Instance   string            `json:"instance"`
	Host       string            `json:"host"`
	PID        int               `json:"pid"`
	Version    string            `json:"v"`
	TraceID    string            `json:"trace_id"`
	Labels     map[string]string `json:"labels"`
	TTLms      int64             `json:"ttl_ms"`
	QueuedAt   int64             `json:"queued_at_ms"`
	AcquiredAt int64             `json:"acquired_at_ms"`
	Fence      json.Number       `json:"fence"`
}

// ErrNotLockValue is returned by Decode for bytes that are not a lockgov
// lock value.
var ErrNotLockValue = errors.New("lockvalue: not a lockgov lock value")

// Decode reads a lock value written by a Writer. It returns ErrNotLockValue
// (wrapped) for anything that is not a JSON object with at least one of the
// members a Writer always writes (service, pid), so that another library's
// JSON is not mistaken for a holder.
func Decode(data []byte) (Holder, error) {
	var w wire
	if len(data) == 0 || data[0] != '{' {
		return Holder{}, ErrNotLockValue
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return Holder{}, fmt.Errorf("%w: %w", ErrNotLockValue, err)
	}
	if w.Service == "" && w.PID == 0 {
		return Holder{}, fmt.Errorf("%w: no service and no pid", ErrNotLockValue)
	}
	h := Holder{
		Service:  clip(w.Service),
		Instance: clip(w.Instance),
		Host:     clip(w.Host),
		PID:      w.PID,
		Version:  clip(w.Version),
		TraceID:  clip(w.TraceID),
		TTL:      time.Duration(max(w.TTLms, 0)) * time.Millisecond,
	}
	if w.QueuedAt > 0 {
		h.QueuedAt = time.UnixMilli(w.QueuedAt)
	}
	if w.AcquiredAt > 0 {
		h.AcquiredAt = time.UnixMilli(w.AcquiredAt)
	}
	if w.Fence != "" {
		f, err := strconv.ParseUint(string(w.Fence), 10, 64)
		if err != nil {
			return Holder{}, fmt.Errorf("%w: fence %q: %w", ErrNotLockValue, clip(string(w.Fence)), err)
		}
		h.Fence = f
	}
	if len(w.Labels) > 0 {
		h.Labels = make(map[string]string, min(len(w.Labels), MaxLabels))
		for k, v := range w.Labels {
			if len(h.Labels) == MaxLabels {
				break
			}
			h.Labels[clip(k)] = clip(v)
		}
	}
	return h, nil
}

func clip(s string) string {
	if len(s) > MaxString {
		return s[:MaxString]
	}
	return s
}

// Writer writes lock values for one process. Its zero value writes only the
// pid; NewWriter adds service, instance, host and version.
type Writer struct {
	head string // `{"service":…,"instance":…,"host":…,"pid":…,"v":…` without the closing brace
}

// NewWriter describes this process as service on instance. An empty service
// defaults to the executable's name, an empty instance to the host name.
func NewWriter(service, instance string) (Writer, error) {
	if service == "" {
		if exe, err := os.Executable(); err == nil {
			service = filepath.Base(exe)
		}
	}
	host, _ := os.Hostname()
	if instance == "" {
		instance = host
	}
	head, err := json.Marshal(struct {
		Service  string `json:"service"`
		Instance string `json:"instance"`
		Host     string `json:"host"`
		PID      int    `json:"pid"`
		Version  string `json:"v"`
	}{service, instance, host, os.Getpid(), Version()})
	if err != nil {
		return Writer{}, err
	}
	return Writer{head: string(head[:len(head)-1])}, nil
}

// Call is what one acquire call adds to the process metadata.
type Call struct {
	TraceID string
	Labels  map[string]string
	TTL     time.Duration
}

// Begin writes the object's members for one acquire call into b, without
// the closing brace: the backend adds its own members (AppendTime,
// AppendFence) and closes the object.
func (w Writer) Begin(b *strings.Builder, c Call) {
	if w.head == "" {
		b.WriteString(`{"pid":`)
		b.WriteString(strconv.Itoa(os.Getpid()))
	} else {
		b.WriteString(w.head)
	}
	if c.TraceID != "" {
		b.WriteString(`,"trace_id":`)
		writeJSONString(b, c.TraceID)
	}
	if len(c.Labels) > 0 {
		if m, err := json.Marshal(c.Labels); err == nil {
			b.WriteString(`,"labels":`)
			b.Write(m)
		}
	}
	if c.TTL > 0 {
		b.WriteString(`,"ttl_ms":`)
		writeInt(b, c.TTL.Milliseconds())
	}
}

// Size bounds how many bytes Begin writes for c, and AppendTime for each of
// times members, so that a caller sizes its builder once: a value that
// outgrows its first buffer is copied into a second, twice the garbage on
// every acquire. It counts every number at its longest, so it is a few
// bytes above the exact size, and it can fall short only for labels or a
// trace id that JSON must escape (the builder then grows, as without it).
func (w Writer) Size(c Call, times int) int {
	n := len(w.head)
	if n == 0 {
		n = len(`{"pid":`) + 10
	}
	if c.TraceID != "" {
		n += len(`,"trace_id":""`) + len(c.TraceID)
	}
	if len(c.Labels) > 0 {
		n += len(`,"labels":{}`)
		for k, v := range c.Labels {
			n += len(k) + len(v) + len(`"":"",`)
		}
	}
	if c.TTL > 0 {
		n += len(`,"ttl_ms":`) + 20
	}
	return n + times*(len(`,"":`)+len(AcquiredAt)+20)
}

// Time members a backend may add.
const (
	QueuedAt   = "queued_at_ms"
	AcquiredAt = "acquired_at_ms"
)

// AppendTime writes `,"name":<unix ms>`.
func AppendTime(b *strings.Builder, name string, t time.Time) {
	b.WriteString(`,"`)
	b.WriteString(name)
	b.WriteString(`":`)
	writeInt(b, t.UnixMilli())
}

// writeInt writes n in decimal without a string in between.
func writeInt(b *strings.Builder, n int64) {
	var d [20]byte
	b.Write(strconv.AppendInt(d[:0], n, 10))
}

// FenceMember is the text that precedes the fence when a backend stores it
// in the object (redislock's scripts append it, then the closing brace).
const FenceMember = `,"fence":`

// writeJSONString writes s as a JSON string; trace ids are hex, so the
// common case needs no escaping and no allocation.
func writeJSONString(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s)
			b.Write(q)
			return
		}
	}
	b.WriteByte('"')
	b.WriteString(s)
	b.WriteByte('"')
}

// Module is lockgov's module path.
const Module = "github.com/lockgov/lockgov"

// Version is the version of lockgov linked into this binary, from the build
// information: the module version when lockgov is a dependency, the main
// module's version when it is the binary being built, "(devel)" otherwise.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Path == Module && bi.Main.Version != "" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == Module {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "(devel)"
}
