package detectors

import (
	"context"
	"fmt"
	"time"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/shellquote"
	"github.com/lockgov/lockgov/policy"
)

// Clock reports instances whose clock offset to the store puts them in the
// degrade or reject skew tier, from their heartbeats: the offset each
// process measured (round-trip corrected) and the tier it applies to
// itself. The worse of the tier the policy gives the offset and the tier
// the process reports is the finding.
type Clock struct {
	beats []Store
	tiers policy.SkewTiers
	cfg   config
}

// NewClock returns the clock-skew detector over the heartbeats in s.
// Options: WithPolicy (its skew tiers), WithHeartbeatsFrom, WithMaxFindings,
// WithNow.
func NewClock(s Store, opts ...Option) (*Clock, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	cfg, err := newConfig(DetectorClock, opts, "WithPolicy")
	if err != nil {
		return nil, err
	}
	return &Clock{beats: append([]Store{s}, cfg.beats...), tiers: cfg.policy.Skew, cfg: cfg}, nil
}

// Name returns "clock".
func (d *Clock) Name() string { return DetectorClock }

// Detect reads the heartbeats once. When some stores' heartbeats cannot
// be read, it ranks those of the others and returns their findings with a
// *PartialError whose scopes are the unread stores (a finding is made from
// one heartbeat, in the store it was read from).
func (d *Clock) Detect(ctx context.Context) ([]Finding, error) {
	fr, err := readFleet(ctx, d.beats, false)
	if err != nil {
		return nil, err
	}
	beats := fr.beats
	out := newCapped(d.cfg.maxFindings)
	degrade, reject := d.tiers.Degrade, d.tiers.Reject
	if degrade == 0 {
		degrade = policy.DefaultSkewDegrade
	}
	if reject == 0 {
		reject = policy.DefaultSkewReject
	}
	for _, b := range beats {
		hb := b.hb
		tier := policy.TierOK
		detail := ""
		if hb.Clock != nil {
			detail = fmt.Sprintf("clock offset %s to the store (measured with RTT %s at %s)",
				hb.Clock.Offset, hb.Clock.RTT, hb.Clock.MeasuredAt.UTC().Format("15:04:05.000Z"))
			if age, stale := staleSample(hb); stale {
				// A publisher keeps its last measurement when it cannot
				// take one: an offset that old says nothing of the clock
				// now, so only the tier the process applies counts.
				detail += fmt.Sprintf(", %s before its beat and not since", age.Round(time.Millisecond))
			} else {
				tier = d.tiers.Tier(hb.Clock.Certain())
			}
		}
		switch hb.Tier {
		case "degrade":
			tier = max(tier, policy.TierDegrade)
		case "reject":
			tier = policy.TierReject
		}
		if tier == policy.TierOK {
			continue
		}
		if detail == "" {
			detail = "no offset published"
		}
		host := hb.Host
		if host == "" {
			host = hb.Instance
		}
		f := Finding{Detector: DetectorClock, Store: b.store.Addr(), Holder: HolderFromHeartbeat(hb)}
		if hb.Clock != nil {
			f.Age = max(d.cfg.now().Sub(hb.Clock.MeasuredAt), 0)
		}
		if tier == policy.TierDegrade {
			f.Kind, f.Severity = KindSkewDegrade, SeverityWarning
			f.Detail = fmt.Sprintf("%s: %s, beyond the degrade threshold %s: its new leases get TTL x%.2g; the process reports tier %q",
				holderString(hb), detail, degrade, skewFactor(d.tiers), hb.Tier)
		} else {
			f.Kind, f.Severity = KindSkewReject, SeverityCritical
			f.Detail = fmt.Sprintf("%s: %s, beyond the reject threshold %s: it refuses new locks and IDs (ErrClockSkew); the process reports tier %q",
				holderString(hb), detail, reject, hb.Tier)
		}
		f.Action = fmt.Sprintf("# fix time sync on host %s (chronyc tracking; chronyc makestep) until |offset| <= %s; the process recovers by itself at its next measurement",
			shellquote.Quote(host), degrade)
		out.add(f)
	}
	return out.result(DetectorClock, ""), fr.partial(fr.storeScopes()...)
}

// staleSample reports how long before hb was sent its clock sample was
// taken, and whether that is more than the three intervals a heartbeat
// lives: the publisher then has not measured its clock for as long as it
// would take the agent to see the process gone. Both times are the
// process's own clock: a store sample's MeasuredAt is read from it; an
// agent's (a TierReport) is the agent's, which is Offset behind the
// process's.
func staleSample(hb *fleet.Heartbeat) (time.Duration, bool) {
	if hb.Interval <= 0 || hb.SentAt.IsZero() || hb.Clock.MeasuredAt.IsZero() {
		return 0, false
	}
	measured := hb.Clock.MeasuredAt
	if hb.Clock.Source == fleet.ClockSourceAgent {
		measured = measured.Add(hb.Clock.Offset)
	}
	age := hb.SentAt.Sub(measured)
	return age, age > 3*hb.Interval
}

func skewFactor(s policy.SkewTiers) float64 {
	if s.DegradeTTLFactor == 0 {
		return policy.DefaultSkewDegradeTTLFactor
	}
	return s.DegradeTTLFactor
}
