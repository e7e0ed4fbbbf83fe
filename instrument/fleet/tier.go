package fleet

import (
	"encoding/json"
	"fmt"
	"time"
)

// TierReport is a clock offset the agent measured for an instance and wrote
// back into the store, for processes that cannot measure their own: etcd
// exposes no clock, so an etcd-only process cannot compare its wall clock
// with its store's.
//
// The agent measures it from the heartbeats themselves: it watches the
// heartbeat prefix and, for each beat it receives, takes its own wall clock
// minus the beat's SentAt. That difference is the process's offset to the
// agent's clock plus the delivery delay (positive, at most one watch round
// trip); the smallest difference over several beats is the best estimate,
// as the smallest RTT is for TIME. Adding the agent's own offset to the
// store (measured with TIME on a Redis it watches, else taken as zero: the
// agent's host is expected to run NTP) gives the process's offset. The
// agent writes the report under a TTL of three of its intervals, so a
// report from an agent that stopped disappears, and the process goes back
// to "no measurement" (no tier applied) rather than keep a stale tier.
//
// The library reads the report on every beat when its store has no clock
// (Store.Time returns ErrNoStoreTime) and applies the offset as its own.
// A store with a clock is measured directly and the report is ignored.
type TierReport struct {
	Instance   string        `json:"instance"`
	Offset     time.Duration `json:"offset_ns"`
	Tier       string        `json:"tier,omitempty"` // the tier the agent ranks; the library ranks Offset by its own policy
	MeasuredAt time.Time     `json:"measured_at"`    // agent's wall clock
	By         string        `json:"by,omitempty"`   // the agent that measured it
}

// Key layout of tier reports: one key per instance, beside (not under) the
// heartbeat prefixes, so that a scan of heartbeats never meets one.
const (
	TierRedisPrefix = "lockgov:fleet-tier:"
	TierEtcdPrefix  = "/lockgov/fleet-tier/"
)

// TierRedisKey is the tier report key of instance on Redis.
func TierRedisKey(instance string) string { return TierRedisPrefix + instance }

// TierEtcdKey is the tier report key of instance on etcd.
func TierEtcdKey(instance string) string { return TierEtcdPrefix + instance }

// EncodeTierReport returns r as the stored JSON.
func EncodeTierReport(r *TierReport) ([]byte, error) {
	if r.Instance == "" {
		return nil, fmt.Errorf("fleet: tier report without an instance")
	}
	return json.Marshal(r)
}

// DecodeTierReport reads a stored tier report.
func DecodeTierReport(data []byte) (*TierReport, error) {
	if len(data) > MaxBeatBytes {
		return nil, fmt.Errorf("fleet: tier report of %d bytes, more than %d", len(data), MaxBeatBytes)
	}
	var r TierReport
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("fleet: not a tier report: %w", err)
	}
	if r.Instance == "" {
		return nil, fmt.Errorf("fleet: tier report without an instance")
	}
	return &r, nil
}
