package policy

import (
	"fmt"
	"strconv"
)

// Mode says whether the timeout and TTL rules of a pattern refuse calls,
// only report them, or are not checked.
type Mode uint8

const (
	// ModeEnforce refuses a call that breaks a rule (instrument.ErrPolicy).
	ModeEnforce Mode = iota
	// ModeAudit lets the call through and records the violation.
	ModeAudit
	// ModeOff checks nothing.
	ModeOff
)

var modeNames = [...]string{ModeEnforce: "enforce", ModeAudit: "audit", ModeOff: "off"}

// String returns "enforce", "audit" or "off".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// MarshalText encodes m as its String form.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// ParseMode returns the Mode named s ("enforce", "audit" or "off").
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if n == s {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown mode %q (known: enforce, audit, off)", s)
}

// WaitStrategy says what Acquire does while another holder has the lock.
type WaitStrategy uint8

const (
	// WaitDeadline waits for a release notification until the context deadline.
	WaitDeadline WaitStrategy = iota
	// WaitFailFast makes one attempt.
	WaitFailFast
	// WaitRetry makes up to Wait.Attempts attempts separated by backoff.
	WaitRetry
)

var waitNames = [...]string{WaitDeadline: "deadline", WaitFailFast: "fail_fast", WaitRetry: "retry"}

// String returns "deadline", "fail_fast" or "retry".
func (w WaitStrategy) String() string {
	if int(w) < len(waitNames) {
		return waitNames[w]
	}
	return "WaitStrategy(" + strconv.Itoa(int(w)) + ")"
}

// MarshalText encodes w as its String form.
func (w WaitStrategy) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// ParseWaitStrategy returns the WaitStrategy named s.
func ParseWaitStrategy(s string) (WaitStrategy, error) {
	for i, n := range waitNames {
		if n == s {
			return WaitStrategy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown wait strategy %q (known: deadline, fail_fast, retry)", s)
}

// BackoffKind is the shape of the pause between retry attempts.
type BackoffKind uint8

const (
	// BackoffExponential doubles the pause from Wait.Min up to Wait.Max, with jitter.
	BackoffExponential BackoffKind = iota
	// BackoffConstant pauses Wait.Min between attempts.
	BackoffConstant
)

var backoffNames = [...]string{BackoffExponential: "exponential", BackoffConstant: "constant"}

// String returns "exponential" or "constant".
func (b BackoffKind) String() string {
	if int(b) < len(backoffNames) {
		return backoffNames[b]
	}
	return "BackoffKind(" + strconv.Itoa(int(b)) + ")"
}

// MarshalText encodes b as its String form.
func (b BackoffKind) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// ParseBackoffKind returns the BackoffKind named s.
func ParseBackoffKind(s string) (BackoffKind, error) {
	for i, n := range backoffNames {
		if n == s {
			return BackoffKind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown backoff %q (known: exponential, constant)", s)
}
