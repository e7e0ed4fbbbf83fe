package chaos

import (
	"encoding/json"
	"math"
	"sync"
	"time"
)

// Kind is an operation's kind.
type Kind string

// The kinds of operation a history holds.
const (
	Acquire Kind = "acquire"
	Release Kind = "release" // the end of a hold (see the package doc)
	Write   Kind = "write"
	Read    Kind = "read"
)

// Outcome is what an operation's caller learnt.
type Outcome string

// The outcomes.
const (
	OK      Outcome = "ok"
	Stale   Outcome = "stale"   // a fenced write refused with ErrStaleFence
	Failed  Outcome = "failed"  // definitely without effect
	Unknown Outcome = "unknown" // may or may not have taken effect
)

// Open is the Return of an operation whose effect may come at any time.
const Open = math.MaxInt64

// Op is one operation: its client, kind, call and return times (nanoseconds
// since the history started, on the monotonic clock), and what came of it.
type Op struct {
	Client  int     `json:"client"`
	Kind    Kind    `json:"kind"`
	Call    int64   `json:"call"`
	Return  int64   `json:"return"`
	Fence   uint64  `json:"fence,omitempty"`
	Counter int     `json:"counter,omitempty"` // the writer's own count
	Outcome Outcome `json:"outcome"`
	Stored  uint64  `json:"stored,omitempty"` // Stale: the fence stored; Read: the fence read
	Value   string  `json:"value,omitempty"`  // Write: written; Read: read
	Err     string  `json:"err,omitempty"`
}

// History records operations from many goroutines.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the time on the history's clock.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records op.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the operations recorded so far.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Count returns how many operations of kind ended with outcome.
func (h *History) Count(kind Kind, outcome Outcome) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, op := range h.ops {
		if op.Kind == kind && op.Outcome == outcome {
			n++
		}
	}
	return n
}

// MarshalJSON writes the operations.
func (h *History) MarshalJSON() ([]byte, error) { return json.Marshal(h.Ops()) }
