package policy

import (
	"math"
	"strconv"
	"time"
)

// Tier is the response to a measured clock offset.
type Tier uint8

const (
	// TierOK: the offset is within normal NTP adjustment; it is only reported.
	TierOK Tier = iota
	// TierDegrade: new leases get their TTL scaled by SkewTiers.DegradeTTLFactor.
	TierDegrade
	// TierReject: new locks and new IDs are refused (instrument.ErrClockSkew).
	TierReject
)

var tierNames = [...]string{TierOK: "ok", TierDegrade: "degrade", TierReject: "reject"}

// String returns "ok", "degrade" or "reject".
func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return "Tier(" + strconv.Itoa(int(t)) + ")"
}

// MarshalText encodes t as its String form.
func (t Tier) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Defaults of SkewTiers, from the spec's drift response table.
const (
	DefaultSkewDegrade          = 100 * time.Millisecond
	DefaultSkewReject           = 500 * time.Millisecond
	DefaultSkewDegradeTTLFactor = 0.7
)

// SkewTiers maps a clock offset to a Tier. A zero field takes its default,
// so the zero SkewTiers is the spec's 100ms / 500ms / 0.7.
type SkewTiers struct {
	Degrade          time.Duration // |offset| above this: degrade (default 100ms)
	Reject           time.Duration // |offset| above this: reject (default 500ms)
	DegradeTTLFactor float64       // TTL multiplier in the degrade tier (default 0.7)
}

func (s SkewTiers) withDefaults() SkewTiers {
	if s.Degrade == 0 {
		s.Degrade = DefaultSkewDegrade
	}
	if s.Reject == 0 {
		s.Reject = DefaultSkewReject
	}
	if s.DegradeTTLFactor == 0 {
		s.DegradeTTLFactor = DefaultSkewDegradeTTLFactor
	}
	return s
}

// Tier returns the tier of offset. The sign does not matter: a clock that is
// ahead breaks leases as surely as one that is behind. |offset| <= Degrade is
// ok, |offset| <= Reject is degrade, anything larger is reject.
func (s SkewTiers) Tier(offset time.Duration) Tier {
	s = s.withDefaults()
	if offset < 0 {
		if offset == math.MinInt64 {
			return TierReject
		}
		offset = -offset
	}
	switch {
	case offset <= s.Degrade:
		return TierOK
	case offset <= s.Reject:
		return TierDegrade
	default:
		return TierReject
	}
}

// DegradeTTL returns ttl scaled by DegradeTTLFactor, never below one
// millisecond: the TTL a new lease gets in TierDegrade.
func (s SkewTiers) DegradeTTL(ttl time.Duration) time.Duration {
	if ttl <= time.Millisecond {
		return ttl
	}
	d := time.Duration(float64(ttl) * s.withDefaults().DegradeTTLFactor)
	return max(d, time.Millisecond)
}
