package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Heartbeat is what one governed process publishes about itself, under a
// TTL, into each store its locks and WorkerIDs use. It never carries owner
// tokens: it names keys and fences, which anyone who can read the store can
// read anyway.
type Heartbeat struct {
	// Publisher is a random stamp of the publisher that wrote the beat,
	// unique per publisher and process run (one of the process run, a dash,
	// one of the publisher); it comes first in the encoding (see StampOf).
	// A process reaching one store under two addresses has two publishers
	// on one key, which know each other by it.
	Publisher string `json:"publisher,omitempty"`
	// Instance identifies the process across the fleet (default: host name
	// plus pid); Service is its service name.
	Instance string `json:"instance"`
	Service  string `json:"service"`
	Version  string `json:"version"` // lockgov version
	Host     string `json:"host"`
	PID      int    `json:"pid"`
	// StartedAt is when the publisher started; SentAt when this beat was
	// written, both by the process's wall clock.
	StartedAt time.Time `json:"started_at"`
	SentAt    time.Time `json:"sent_at"`
	// Interval is how often the process publishes; the entry lives 3
	// intervals, so a process that stops is gone after that.
	Interval time.Duration `json:"interval_ns"`

	// Clock is the process's measured offset to the store's clock.
	Clock *ClockSample `json:"clock,omitempty"`
	// Tier is the skew tier the process applies to itself: "ok",
	// "degrade" or "reject" (see policy.SkewTiers).
	Tier string `json:"tier,omitempty"`

	// WorkerIDs are the Snowflake WorkerIDs the process holds.
	WorkerIDs []WorkerID `json:"worker_ids,omitempty"`
	// Held are the locks the process holds; Waiting the keys its goroutines
	// wait for. Together they are this process's part of the fleet-wide
	// wait-for graph.
	Held    []HeldLock    `json:"held,omitempty"`
	Waiting []WaitingLock `json:"waiting,omitempty"`
	// Truncated is true when Held or Waiting were cut: at MaxLocks, or
	// (by the publisher, newest entries first) to keep the beat within
	// MaxBeatBytes. A truncated beat does not list every lock the process
	// holds or waits for; the process is alive all the same.
	Truncated bool `json:"truncated,omitempty"`
}

// ClockSample is one measurement of the offset between this process's wall
// clock and the store's: Offset = local - store at the same instant, from
// the best of several round trips (the one with the smallest RTT), with the
// reply's store time taken as the midpoint of that round trip.
type ClockSample struct {
	Offset     time.Duration `json:"offset_ns"`
	RTT        time.Duration `json:"rtt_ns"`
	MeasuredAt time.Time     `json:"measured_at"`
	// Source says who measured it: "store" (the process, with the store's
	// TIME) or "agent" (a TierReport the agent wrote back; RTT is zero).
	Source string `json:"source,omitempty"`
}

// Certain returns the part of Offset its round trip cannot explain: Offset
// moved toward zero by RTT/2, and zero when |Offset| <= RTT/2. The store
// answered somewhere inside the round trip, so the true offset is at least
// this far from zero. Skew tiers are ranked by it, so that a process on a
// loaded machine, whose best TIME round trip took 300 ms, is not put in a
// tier by its own latency.
func (s *ClockSample) Certain() time.Duration {
	half := s.RTT / 2
	switch {
	case s.Offset > half:
		return s.Offset - half
	case s.Offset < -half:
		return s.Offset + half
	}
	return 0
}

// Sources of a ClockSample.
const (
	ClockSourceStore = "store"
	ClockSourceAgent = "agent"
)

// WorkerID is one WorkerID lease a process holds.
type WorkerID struct {
	Service string `json:"service"`
	ID      int64  `json:"id"`
	// Key is the claim key in the store (workerid's slot key).
	Key string `json:"key,omitempty"`
}

// HeldLock is a lock a process holds.
type HeldLock struct {
	Key     string    `json:"key"`
	Pattern string    `json:"pattern"`
	Backend string    `json:"backend"`
	Fence   uint64    `json:"fence,omitempty"`
	Since   time.Time `json:"since"`
	// Fallback marks a process-local lock taken in the store's place
	// (instrument.FailOpen during an outage): it excludes only this
	// process's goroutines, so it is no lock of the store and none of
	// another process's fallback on the same key. Absent (false): the
	// store's lock, as in every beat written before the field existed.
	Fallback bool `json:"fallback,omitempty"`
}

// WaitingLock is a key a goroutine of the process waits for.
type WaitingLock struct {
	Key     string    `json:"key"`
	Pattern string    `json:"pattern"`
	Backend string    `json:"backend"`
	Since   time.Time `json:"since"`
	// HoldsWhileWaiting are the keys the waiting goroutine already holds
	// (from its context): the edges of a lock-order inversion.
	HoldsWhileWaiting []string `json:"holds_while_waiting,omitempty"`
	// Fallback marks a wait for a process-local lock taken in the store's
	// place (see HeldLock.Fallback): only a holder in this process can be
	// what it waits for.
	Fallback bool `json:"fallback,omitempty"`
}

// Limits of one heartbeat.
const (
	MaxLocks      = 1000      // held and waiting entries kept per beat
	MaxBeatBytes  = 256 << 10 // a larger value is refused by Decode; the publisher never writes one
	DefaultPeriod = 5 * time.Second
)

// Key layout. Redis keeps one key per instance under RedisPrefix (SCAN
// RedisPrefix*, on every Cluster primary); etcd one key per instance under
// EtcdPrefix, attached to a lease of 3 intervals.
const (
	RedisPrefix = "lockgov:fleet:"
	EtcdPrefix  = "/lockgov/fleet/"
)

// RedisKey is the heartbeat key of instance on Redis.
func RedisKey(instance string) string { return RedisPrefix + instance }

// EtcdKey is the heartbeat key of instance on etcd.
func EtcdKey(instance string) string { return EtcdPrefix + instance }

// InstanceFromKey returns the instance a heartbeat key belongs to.
func InstanceFromKey(key string) (string, bool) {
	for _, p := range []string{RedisPrefix, EtcdPrefix} {
		if s, ok := strings.CutPrefix(key, p); ok && s != "" {
			return s, true
		}
	}
	return "", false
}

// StampOf returns the Publisher of an encoded heartbeat without decoding
// it, "" when there is none: Encode writes it first.
func StampOf(data []byte) string {
	const prefix = `{"publisher":"`
	rest, ok := bytes.CutPrefix(data, []byte(prefix))
	if !ok {
		return ""
	}
	stamp, _, ok := bytes.Cut(rest, []byte(`"`))
	if !ok {
		return ""
	}
	return string(stamp)
}

// ErrNotHeartbeat is returned by Decode for bytes that are not a heartbeat.
var ErrNotHeartbeat = errors.New("fleet: not a lockgov heartbeat")

// Encode returns hb as the stored JSON.
func Encode(hb *Heartbeat) ([]byte, error) {
	if hb.Instance == "" {
		return nil, fmt.Errorf("fleet: heartbeat without an instance")
	}
	return json.Marshal(hb)
}

// Decode reads a stored heartbeat. It refuses oversized values and values
// without an instance, and cuts Held and Waiting at MaxLocks.
func Decode(data []byte) (*Heartbeat, error) {
	if len(data) > MaxBeatBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrNotHeartbeat, len(data), MaxBeatBytes)
	}
	var hb Heartbeat
	if err := json.Unmarshal(data, &hb); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotHeartbeat, err)
	}
	if hb.Instance == "" {
		return nil, fmt.Errorf("%w: no instance", ErrNotHeartbeat)
	}
	if len(hb.Held) > MaxLocks {
		hb.Held, hb.Truncated = hb.Held[:MaxLocks], true
	}
	if len(hb.Waiting) > MaxLocks {
		hb.Waiting, hb.Truncated = hb.Waiting[:MaxLocks], true
	}
	return &hb, nil
}
