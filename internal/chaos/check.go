package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// CheckOptions says what the backend under test promises.
type CheckOptions struct {
	// MutexPromised: the backend promises exclusion under this fault (single
	// Redis, etcd). Otherwise the mutex verdict is reported, not required.
	MutexPromised bool
	// StrictStale: a refusal reports the fence stored at that moment
	// (Redis, SQL); false for etcd.
	StrictStale bool
	// Dir receives the history and the visualisation when a check fails.
	Dir string
	// Timeout bounds each porcupine check (default 60s); a check that runs
	// out reports porcupine.Unknown, which fails.
	Timeout time.Duration
}

// Report is what a history showed.
type Report struct {
	Scenario      string
	Ops           int // operations recorded
	Holds         int // successful acquisitions
	Writes        int // writes attempted
	Accepted      int // writes applied
	StaleRefused  int // writes refused with ErrStaleFence
	Unknown       int // writes with an unknown outcome
	Reads         int
	StaleAccepted int // accepted writes whose fence was not above one accepted before they began
	Resource      porcupine.CheckResult
	Mutex         porcupine.CheckResult
	MutexPromised bool
	Files         []string // written when the check failed
}

// OK reports whether the promises hold: no stale write accepted, the
// resource linearizable, and exclusion where it is promised.
func (r Report) OK() bool {
	return r.StaleAccepted == 0 && r.Resource == porcupine.Ok &&
		(!r.MutexPromised || r.Mutex == porcupine.Ok)
}

// String is one line for logs and the docs table.
func (r Report) String() string {
	s := fmt.Sprintf("%s: %d ops, %d holds, %d writes (%d accepted, %d stale refused, %d unknown), %d reads; stale accepted %d; resource %s; mutex %s",
		r.Scenario, r.Ops, r.Holds, r.Writes, r.Accepted, r.StaleRefused, r.Unknown, r.Reads, r.StaleAccepted, r.Resource, r.Mutex)
	if !r.MutexPromised {
		s += " (not promised)"
	}
	if len(r.Files) > 0 {
		s += "; see " + strings.Join(r.Files, ", ")
	}
	return s
}

// Check checks h and, when a promise fails, writes the history and
// porcupine's visualisations into opts.Dir.
func Check(scenario string, h *History, opts CheckOptions) Report {
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	ops := h.Ops()
	r := Report{Scenario: scenario, Ops: len(ops), MutexPromised: opts.MutexPromised}
	var resOps, lockOps []porcupine.Operation
	for _, op := range ops {
		switch op.Kind {
		case Write:
			r.Writes++
			switch op.Outcome {
			case OK:
				r.Accepted++
			case Stale:
				r.StaleRefused++
			case Unknown:
				r.Unknown++
			}
			resOps = append(resOps, porcupine.Operation{ClientId: op.Client, Call: op.Call, Return: op.Return,
				Input: resourceInput{write: true, fence: op.Fence, value: op.Value}, Output: op})
		case Read:
			if op.Outcome != OK {
				continue // a failed read says nothing
			}
			r.Reads++
			resOps = append(resOps, porcupine.Operation{ClientId: op.Client, Call: op.Call, Return: op.Return,
				Input: resourceInput{}, Output: op})
		case Acquire, Release:
			if op.Kind == Acquire {
				r.Holds++
			}
			lockOps = append(lockOps, porcupine.Operation{ClientId: op.Client, Call: op.Call, Return: op.Return,
				Input: mutexInput{acquire: op.Kind == Acquire, client: op.Client}, Output: op})
		}
	}
	r.StaleAccepted = staleAccepted(ops)

	resModel := resourceModel(opts.StrictStale)
	var resInfo porcupine.LinearizationInfo
	r.Resource, resInfo = porcupine.CheckOperationsVerbose(resModel, resOps, opts.Timeout)
	mModel := mutexModel()
	var mInfo porcupine.LinearizationInfo
	r.Mutex, mInfo = porcupine.CheckOperationsVerbose(mModel, lockOps, opts.Timeout)

	if r.OK() || opts.Dir == "" {
		return r
	}
	base := filepath.Join(opts.Dir, sanitize(scenario))
	if b, err := json.MarshalIndent(ops, "", " "); err == nil {
		if err := os.WriteFile(base+"-history.json", b, 0o644); err == nil {
			r.Files = append(r.Files, base+"-history.json")
		}
	}
	if r.Resource != porcupine.Ok {
		if err := porcupine.VisualizePath(resModel, resInfo, base+"-resource.html"); err == nil {
			r.Files = append(r.Files, base+"-resource.html")
		}
	}
	if r.Mutex != porcupine.Ok {
		if err := porcupine.VisualizePath(mModel, mInfo, base+"-mutex.html"); err == nil {
			r.Files = append(r.Files, base+"-mutex.html")
		}
	}
	return r
}

// staleAccepted counts accepted writes whose fence is not above the fence of a
// write accepted before they were called: the resource took a write from a
// holder that a newer holder had already superseded there.
func staleAccepted(ops []Op) int {
	var acc []Op
	for _, op := range ops {
		if op.Kind == Write && op.Outcome == OK {
			acc = append(acc, op)
		}
	}
	byReturn := append([]Op(nil), acc...)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	maxBefore := make([]uint64, len(byReturn)+1) // max fence among the first i to return
	for i, op := range byReturn {
		maxBefore[i+1] = max(maxBefore[i], op.Fence)
	}
	n := 0
	for _, w := range acc {
		// how many accepted writes returned before w was called
		k := sort.Search(len(byReturn), func(i int) bool { return byReturn[i].Return >= w.Call })
		if maxBefore[k] >= w.Fence {
			n++
		}
	}
	return n
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}
