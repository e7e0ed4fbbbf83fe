package detectors

import (
	"context"
	"encoding/json"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/lockvalue"
)

// Detector finds one class of problems in the stores it was given.
type Detector interface {
	// Name is the detector's name, the Detector field of its findings:
	// "locks", "clock", "workerid", "deadlock" or "store".
	Name() string
	// Detect reads the stores once and returns what it found, in a
	// deterministic order. An error means the stores could not be read;
	// the findings of the last successful call still stand.
	Detect(ctx context.Context) ([]Finding, error)
}

// Detector names.
const (
	DetectorLocks    = "locks"
	DetectorClock    = "clock"
	DetectorWorkerID = "workerid"
	DetectorDeadlock = "deadlock"
	DetectorStore    = "store"
)

// Finding kinds.
const (
	KindImmortal             = "immortal"
	KindTTLAboveMax          = "ttl_above_max"
	KindHeldTooLong          = "held_too_long"
	KindHolderDead           = "holder_dead"
	KindSkewDegrade          = "skew_degrade"
	KindSkewReject           = "skew_reject"
	KindWorkerIDDuplicate    = "workerid_duplicate"
	KindWorkerIDLeaseGone    = "workerid_lease_gone"
	KindWorkerIDOutOfRange   = "workerid_out_of_range"
	KindWorkerIDRangeOverlap = "workerid_range_overlap"
	KindDeadlock             = "deadlock"
	KindLockOrderInversion   = "lock_order_inversion"
	KindEvictionEnabled      = "eviction_enabled"
	KindEvictionUnknown      = "eviction_unknown"
)

// Severities.
const (
	SeverityInfo     = "info"
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// Finding is one problem a detector found. It never carries an owner token.
type Finding struct {
	Detector   string
	Kind       string
	Severity   string
	Store      string // redacted store address (no password)
	Key        string // the lock or claim key, when there is one
	KeyPattern string
	Holder     *Holder // decoded lock value / heartbeat
	Age        time.Duration
	// TTL is what was left of the lock's TTL when the finding was made,
	// and -1s for a lock that has none (an immortal lock), as
	// Redis's PTTL and the agent's /api/v1/locks (ttl_seconds -1) say it;
	// 0 for a finding about no lock.
	TTL    time.Duration
	Detail string
	Action string // what an operator should do
	// Version is the version of the lock the finding is about when that
	// lock has no TTL (Lock.Version): the agent's remediation deletes such
	// a lock only at this version when it is sent as If-Match. Empty for
	// every other finding.
	Version string
}

// Holder is who holds a lock, from its value and, when the holder
// publishes them, its heartbeats. It never carries the owner token.
type Holder struct {
	Service    string            `json:"service,omitempty"`
	Instance   string            `json:"instance,omitempty"`
	Host       string            `json:"host,omitempty"`
	PID        int               `json:"pid,omitempty"`
	Version    string            `json:"version,omitempty"`
	TraceID    string            `json:"trace_id,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	AcquiredAt time.Time         `json:"acquired_at,omitzero"`
	Fence      uint64            `json:"fence,omitempty"`
	// Foreign is true for a value lockgov did not write: nothing above is
	// known.
	Foreign bool `json:"foreign,omitempty"`
	// Heartbeat is "live" when the holder's instance publishes heartbeats,
	// "gone" when it did and stopped, "unknown" when it is not seen in the
	// stores read but may publish into one that could not be read
	// (PartialError), empty when it was never seen.
	Heartbeat string `json:"heartbeat,omitempty"`
}

// HolderFromValue is the Holder of a decoded lock value.
func HolderFromValue(h lockvalue.Holder) *Holder {
	return &Holder{Service: h.Service, Instance: h.Instance, Host: h.Host, PID: h.PID, Version: h.Version,
		TraceID: h.TraceID, Labels: h.Labels, AcquiredAt: h.AcquiredAt, Fence: h.Fence, Foreign: h.Foreign}
}

// HolderFromHeartbeat is the Holder describing a heartbeat's instance.
func HolderFromHeartbeat(hb *fleet.Heartbeat) *Holder {
	return &Holder{Service: hb.Service, Instance: hb.Instance, Host: hb.Host, PID: hb.PID, Version: hb.Version, Heartbeat: "live"}
}

type findingJSON struct {
	Detector   string  `json:"detector"`
	Kind       string  `json:"kind"`
	Severity   string  `json:"severity"`
	Store      string  `json:"store"`
	Key        string  `json:"key"`
	KeyBase64  []byte  `json:"key_base64,omitempty"`
	KeyPattern string  `json:"key_pattern"`
	Holder     *Holder `json:"holder,omitempty"`
	Age        float64 `json:"age_seconds"`
	TTL        float64 `json:"ttl_seconds"`
	Detail     string  `json:"detail"`
	Action     string  `json:"action"`
	Version    string  `json:"version,omitempty"`
}

// MarshalJSON encodes f with snake_case names and Age and TTL in seconds
// (age_seconds, ttl_seconds). A Key that is not valid UTF-8 (another
// application's key: a key is bytes to Redis and etcd) is also written as
// key_base64, the standard base64 (RFC 4648, padded) of its bytes: "key"
// then has U+FFFD for each byte that is not UTF-8, as encoding/json writes
// it, and may be another key that exists. A UTF-8 Key has no key_base64.
// Version is written only when there is one.
func (f Finding) MarshalJSON() ([]byte, error) {
	return json.Marshal(findingJSON{f.Detector, f.Kind, f.Severity, f.Store, f.Key, keyBytes(f.Key), f.KeyPattern, f.Holder,
		f.Age.Seconds(), f.TTL.Seconds(), f.Detail, f.Action, f.Version})
}

// keyBytes is the key_base64 of key: its bytes when it is not valid UTF-8,
// nil (no field) when "key" says it exactly.
func keyBytes(key string) []byte {
	if utf8.ValidString(key) {
		return nil
	}
	return []byte(key)
}

// UnmarshalJSON decodes what MarshalJSON encodes (a follower agent serving
// the leader's findings reads them back); key_base64, when there, is the
// Key.
func (f *Finding) UnmarshalJSON(b []byte) error {
	var j findingJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if j.KeyBase64 != nil {
		j.Key = string(j.KeyBase64)
	}
	*f = Finding{Detector: j.Detector, Kind: j.Kind, Severity: j.Severity, Store: j.Store, Key: j.Key,
		KeyPattern: j.KeyPattern, Holder: j.Holder, Age: seconds(j.Age), TTL: seconds(j.TTL), Detail: j.Detail, Action: j.Action,
		Version: j.Version}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// SortFindings orders findings by detector, kind, store, key, instance and
// detail: the order Detect returns them in.
func SortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool { return less(&fs[i], &fs[j]) })
}

func less(a, b *Finding) bool {
	if a.Detector != b.Detector {
		return a.Detector < b.Detector
	}
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	if a.Store != b.Store {
		return a.Store < b.Store
	}
	if a.Key != b.Key {
		return a.Key < b.Key
	}
	ai, bi := "", ""
	if a.Holder != nil {
		ai = a.Holder.Instance
	}
	if b.Holder != nil {
		bi = b.Holder.Instance
	}
	if ai != bi {
		return ai < bi
	}
	return a.Detail < b.Detail
}
