// Package leasecore is the lifecycle of one lease, written once for every
// lock backend and adapter (redislock, etcdlock, etcdlock's Mutex adapter,
// instrument.FromFunc): the local expiry at the last confirmed expiry minus
// a drift margin, the watchdog that renews every TTL/3 and stops at max hold
// or on the first renewal that proves ownership gone, ending once with a
// cause, the Renewed/Lost/Leaked events, ErrNotHeld on a second Release, and
// the release of a lease the garbage collector found still held.
//
// A backend supplies what only it knows — how to renew and how to release,
// owner-checked, in one round trip each — and composes a *Lease the way
// etcd's Mutex composes a Session.
//
// It is internal to instrument: third-party backends adapt their lock
// through instrument.FromFunc, which runs on this core too. The package is
// standard-library only, so that the sentinel errors it produces can be
// instrument's own (instrument re-exports them) without an import cycle.
//
// # Timing
//
// Expiry is measured on this process's monotonic clock from the moment the
// confirming call was sent (Start, then each successful renewal's send
// time), never from when its reply arrived: a reply delayed in the network
// cannot extend the lease beyond what the store granted. The context ends
// Drift(TTL) = 2 ms + 2% of the TTL before that, for clock-rate differences
// and timer lateness.
//
// # Failure modes
//
// A renewal that fails for a transport reason is retried at TTL/12 until
// the local deadline; past it the lease is lost whatever the store says
// later. A Release whose outcome is unknown (transport error) ends the lease
// as lost: the store ends it at its TTL at the latest, since the watchdog is
// stopped. A Release whose context ends while it waits for a renewal in
// flight returns at once and ends the lease as lost too, but does not drop
// the release: the backend's runs once the renewal has settled, on the
// ended context, as it would have without a renewal in flight (etcdlock then
// revokes in the background, redislock gives the lock back in the
// background). A backend whose lock outlives the watchdog (etcdlock's Mutex
// adapter: the session's keepalive renews the key) must keep deleting it
// itself until the delete is confirmed. Backends whose release is not
// owner-checked (FromFunc wrapping a plain DEL) set UnsafeRelease, and then
// a Release after the lease ended returns ErrNotHeld without calling the
// backend: it could delete the next holder's lock.
package leasecore
