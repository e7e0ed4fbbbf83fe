package workerid

import (
	"errors"
	"fmt"
)

var (
	// ErrCollision matches a *CollisionError: the slot is held by another live owner.
	ErrCollision = errors.New("workerid: slot held by another owner")
	// ErrNoFreeSlot: every slot in the service's range is held.
	ErrNoFreeSlot = errors.New("workerid: no free slot in the service's range")
	// ErrTakenOver: the lease expired and another owner claimed the slot.
	ErrTakenOver = errors.New("workerid: slot taken over by another owner")
	// ErrReleased is the lease's error after Release.
	ErrReleased = errors.New("workerid: lease released")
	// ErrInvalid wraps configuration and argument errors.
	ErrInvalid = errors.New("workerid: invalid argument")
)

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
