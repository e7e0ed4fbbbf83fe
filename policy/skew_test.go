package policy

import (
	"math"
	"testing"
	"time"
)

func TestSkewTiers_TierBoundariesAreInclusiveAndSignless(t *testing.T) {
	ms := time.Millisecond
	tiers := []SkewTiers{Default().Skew, {}} // the zero value takes the defaults
	cases := []struct {
		offset time.Duration
		want   Tier
	}{
		{0, TierOK},
		{100 * ms, TierOK},
		{100*ms + 1, TierDegrade},
		{101 * ms, TierDegrade},
		{500 * ms, TierDegrade},
		{500*ms + 1, TierReject},
		{501 * ms, TierReject},
		{-100 * ms, TierOK},
		{-101 * ms, TierDegrade},
		{-500 * ms, TierDegrade},
		{-501 * ms, TierReject},
		{math.MinInt64, TierReject},
		{math.MaxInt64, TierReject},
	}
	for _, s := range tiers {
		for _, c := range cases {
			if got := s.Tier(c.offset); got != c.want {
				t.Errorf("%+v.Tier(%v) = %v, want %v", s, c.offset, got, c.want)
			}
		}
	}
}

func TestSkewTiers_CustomBoundaries(t *testing.T) {
	s := SkewTiers{Degrade: 10 * time.Millisecond, Reject: 20 * time.Millisecond, DegradeTTLFactor: 0.5}
	for off, want := range map[time.Duration]Tier{
		10 * time.Millisecond: TierOK, 11 * time.Millisecond: TierDegrade,
		20 * time.Millisecond: TierDegrade, 21 * time.Millisecond: TierReject,
	} {
		if got := s.Tier(off); got != want {
			t.Errorf("Tier(%v) = %v, want %v", off, got, want)
		}
	}
	if got := s.DegradeTTL(10 * time.Second); got != 5*time.Second {
		t.Errorf("DegradeTTL(10s) = %v, want 5s", got)
	}
}

func TestSkewTiers_DegradeTTLScalesBy07ByDefault(t *testing.T) {
	if got := (SkewTiers{}).DegradeTTL(10 * time.Second); got != 7*time.Second {
		t.Errorf("DegradeTTL(10s) = %v, want 7s", got)
	}
	if got := (SkewTiers{}).DegradeTTL(time.Millisecond); got != time.Millisecond {
		t.Errorf("DegradeTTL(1ms) = %v, want 1ms (never below 1ms)", got)
	}
}

func TestEnums_StringAndParseRoundTrip(t *testing.T) {
	for _, m := range []Mode{ModeEnforce, ModeAudit, ModeOff} {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m, got, err)
		}
	}
	for _, w := range []WaitStrategy{WaitDeadline, WaitFailFast, WaitRetry} {
		if got, err := ParseWaitStrategy(w.String()); err != nil || got != w {
			t.Errorf("ParseWaitStrategy(%q) = %v, %v", w, got, err)
		}
	}
	for _, b := range []BackoffKind{BackoffExponential, BackoffConstant} {
		if got, err := ParseBackoffKind(b.String()); err != nil || got != b {
			t.Errorf("ParseBackoffKind(%q) = %v, %v", b, got, err)
		}
	}
	want := map[string]string{
		ModeEnforce.String(): "enforce", ModeAudit.String(): "audit", ModeOff.String(): "off",
		WaitDeadline.String(): "deadline", WaitFailFast.String(): "fail_fast", WaitRetry.String(): "retry",
		BackoffExponential.String(): "exponential", BackoffConstant.String(): "constant",
		TierOK.String(): "ok", TierDegrade.String(): "degrade", TierReject.String(): "reject",
	}
	for got, w := range want {
		if got != w {
			t.Errorf("String() = %q, want %q", got, w)
		}
	}
	if _, err := ParseMode("Enforce"); err == nil {
		t.Error("ParseMode is case-sensitive; want an error for Enforce")
	}
	if s := Mode(9).String(); s != "Mode(9)" {
		t.Errorf("Mode(9).String() = %q", s)
	}
}
