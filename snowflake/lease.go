package snowflake

import "time"

// WorkerLease is what a Generator needs from a WorkerID lease. *workerid.Lease implements it.
type WorkerLease interface {
	WorkerID() int64
	// State is called on every ID; it must be cheap and safe for concurrent use.
	State() LeaseState
}

// LeaseState is a snapshot of a WorkerID lease.
type LeaseState struct {
	// ValidUntil is the local instant, read from time.Now so that it carries a monotonic
	// reading, before which the lease is certainly still held: the last confirmed expiry
	// minus a drift margin. The zero time means not held.
	ValidUntil time.Time
	// FloorUnixMilli is the persisted high-water mark: IDs must be issued in a later
	// millisecond (Unix ms). Zero means none.
	FloorUnixMilli int64
	// LimitUnixMilli is the high-water mark the current holder has persisted for itself: IDs
	// must not be issued in a later millisecond. Zero means no limit.
	LimitUnixMilli int64
	// Err says why the lease is lost, when it is known to be.
	Err error
}

// lastUsedTracker is implemented by leases that persist the generator's real last-used
// millisecond on release, so that a graceful restart need not wait out the reservation.
type lastUsedTracker interface {
	TrackLastUsed(func() time.Time)
}

// generatorBinder is implemented by leases that admit one generator at a time (as
// *workerid.Lease does). New calls BindGenerator instead of TrackLastUsed: it registers the
// generator's last-used func and reports false, registering nothing, when a generator is
// already bound. Two generators on one lease share its WorkerID and floor but not their
// state, so in the same millisecond they issue the same IDs.
type generatorBinder interface {
	BindGenerator(lastUsed func() time.Time) bool
}

// layoutLease is implemented by leases whose WorkerIDs are handed out for one layout (a
// *workerid.Lease: its Registry's, workerid.WithLayout or the default): New refuses a
// generator of another layout. ok is false when the lease does not know the layout.
type layoutLease interface {
	Layout() (l Layout, ok bool)
}

// epochLease is implemented by leases whose WorkerIDs are handed out for one epoch (a
// *workerid.Lease: its Registry records the epoch, with the layout, beside the slot's
// high-water mark): New refuses a generator of another epoch, as it would count its IDs'
// time from another instant than the mark's holders did. ok is false when the lease does
// not know the epoch.
type epochLease interface {
	Epoch() (epoch time.Time, ok bool)
}
