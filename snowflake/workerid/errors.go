package workerid

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

var (
	// ErrCollision matches a *CollisionError: the slot is held by another live owner.
	ErrCollision = errors.New("workerid: slot held by another owner")
	// ErrNoFreeSlot: every slot in the service's range is held, or records another epoch
	// of the Registry's layout (then it wraps the first *SpaceMismatchError too).
	ErrNoFreeSlot = errors.New("workerid: no free slot in the service's range")
	// ErrTakenOver: the lease expired and another owner claimed the slot.
	ErrTakenOver = errors.New("workerid: slot taken over by another owner")
	// ErrReleased is the lease's error after Release.
	ErrReleased = errors.New("workerid: lease released")
	// ErrInvalid wraps configuration and argument errors.
	ErrInvalid = errors.New("workerid: invalid argument")
	// ErrSpaceMismatch matches a *SpaceMismatchError: the slot records another ID space
	// (layout and epoch) than the Registry's.
	ErrSpaceMismatch = errors.New("workerid: slot records another ID space")
)

// SpaceMismatchError says that a Claim found the slot recording IDs of another ID space
// than its Registry's: another layout or epoch (WithLayout, WithEpoch). The slot's
// high-water mark is a Unix millisecond while an ID's time counts from its generator's
// epoch, so a generator of another space would issue above the mark IDs that the slot's
// earlier holders already issued. The claim took nothing.
type SpaceMismatchError struct {
	Service  string
	WorkerID int64
	Key      string // the slot key (the space is recorded in Key + ":space")
	// Slot is the space the slot records, Registry the claiming Registry's, each
	// "<layout>@<epoch in Unix ms>", e.g. "41/10/12@1704067200000".
	Slot, Registry string
}

func (e *SpaceMismatchError) Error() string {
	return fmt.Sprintf("workerid: service %q: worker id %d: the slot's IDs are of space %s, recorded in %s; this Registry's are of space %s: "+
		"generators of another layout or epoch on one WorkerID issue the same IDs; build every Registry on the key prefix, and its generators, with one layout and epoch (WithLayout, WithEpoch)",
		e.Service, e.WorkerID, describeSpace(e.Slot), e.Key+spaceSuffix, describeSpace(e.Registry))
}

// Is makes errors.Is(err, ErrSpaceMismatch) true.
func (e *SpaceMismatchError) Is(target error) bool { return target == ErrSpaceMismatch }

// sameLayout reports whether the slot's space has the Registry's layout (and so another
// epoch, or a value that names none).
func (e *SpaceMismatchError) sameLayout() bool {
	slot, _, ok := strings.Cut(e.Slot, "@")
	reg, _, _ := strings.Cut(e.Registry, "@")
	return ok && slot == reg
}

// describeSpace is space as stored, with its epoch as a time when it has one.
func describeSpace(space string) string {
	layout, ms, ok := strings.Cut(space, "@")
	if n, err := strconv.ParseInt(ms, 10, 64); ok && err == nil {
		return fmt.Sprintf("%s (layout %s, epoch %s)", space, layout, time.UnixMilli(n).UTC().Format(time.RFC3339Nano))
	}
	return strconv.Quote(space)
}

// CollisionError says who holds the slot a Claim wanted.
type CollisionError struct {
	Service  string
	WorkerID int64
	Holder   Claim // as stored by the holder; zero if unreadable
}

func (e *CollisionError) Error() string {
	h := e.Holder
	return fmt.Sprintf("workerid: service %q: worker id %d is held by service %q on host %q (pod ip %q, pid %d, claimed %s); use a free ordinal or opt in to WithNextFree",
		e.Service, e.WorkerID, h.Service, h.Hostname, h.PodIP, h.PID, h.ClaimedAt.Format("2006-01-02T15:04:05Z07:00"))
}

// Is makes errors.Is(err, ErrCollision) true.
func (e *CollisionError) Is(target error) bool { return target == ErrCollision }
