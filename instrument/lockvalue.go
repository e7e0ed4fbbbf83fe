package instrument

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// LockValue writes the part of a lock's stored value that tells an operator
// (and the agent) who holds the lock and why: the holder's service, instance
// and pid, and the acquire call's trace id and labels. Backends add their
// own members (fence, times) and close the object. Owner tokens and secrets
// never go here.
type LockValue struct {
	head string // `{"service":…,"instance":…,"pid":…` without the closing brace
}

// NewLockValue describes this process as service on instance; empty values
// default to the executable's name and the host name.
func NewLockValue(service, instance string) (LockValue, error) {
	if service == "" {
		if exe, err := os.Executable(); err == nil {
			service = filepath.Base(exe)
		}
	}
	if instance == "" {
		instance, _ = os.Hostname()
	}
	head, err := json.Marshal(struct {
		Service  string `json:"service"`
		Instance string `json:"instance"`
		PID      int    `json:"pid"`
	}{service, instance, os.Getpid()})
	if err != nil {
		return LockValue{}, err
	}
	return LockValue{head: string(head[:len(head)-1])}, nil
}

// Begin writes the JSON object's opening members for one acquire call into
// b, without the closing brace.
func (v LockValue) Begin(b *strings.Builder, cfg *AcquireConfig) {
	b.WriteString(v.head)
	if cfg.TraceID != "" {
		b.WriteString(`,"trace_id":`)
		writeJSONString(b, cfg.TraceID)
	}
	if len(cfg.Meta) > 0 {
		if m, err := json.Marshal(cfg.Meta); err == nil {
			b.WriteString(`,"labels":`)
			b.Write(m)
		}
	}
}

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
