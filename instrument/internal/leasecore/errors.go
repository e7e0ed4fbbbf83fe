package leasecore

import "errors"

// The lease sentinel errors. instrument re-exports them under the same
// names; callers match them through instrument with errors.Is.
var (
	ErrLockLost = errors.New("lockgov: lock lost")
	ErrNotHeld  = errors.New("lockgov: lock not held")
	ErrReleased = errors.New("lockgov: lock released")
)
