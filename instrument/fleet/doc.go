// Package fleet is the heartbeat every governed process publishes into the
// stores its locks and WorkerIDs use, so that the lockgov agent can tell a
// live holder from a dead one, rank clock-skew tiers, see two instances
// claiming one WorkerID, and build the fleet-wide wait-for graph in which it
// finds distributed deadlocks.
//
// This file set holds the format (Heartbeat, Encode, Decode, TierReport) and
// the key layout, which the agent reads, and the publisher (Attach).
//
// Heartbeats never carry owner tokens.
//
// Held and Waiting list the process's locks and waits; an entry with
// "fallback": true (HeldLock.Fallback, WaitingLock.Fallback) is a
// process-local lock instrument.FailOpen took in the store's place during
// an outage, which no other process's lock on the key excludes or waits
// for. A beat without the field (an older process, or no fallback) lists
// the store's locks, as before the field existed.
//
// # Publisher
//
// A process publishes one heartbeat per store, not one per Locker: Attach
// joins the process's publisher for a Store (keyed by Store.ID, the store's
// addresses), starting it on first use; the last Attachment's Close stops
// it and deletes the heartbeat. That set of publishers is the one piece of
// package-level state in lockgov, because "one per process and store" is a
// property of the process. instrument.Govern attaches every governed
// Locker whose backend implements FleetStore (redislock, etcdlock);
// workerid attaches every WorkerID lease. The first attachment's options
// configure the publisher (WithInstance, WithInterval, WithClock, ...).
//
// Store.ID is the store's addresses, so one store reached under two of them
// (two clients of one Redis by name and by IP, a Sentinel client beside a
// direct one, two etcd clients with other endpoint lists) gets two
// publishers writing one key. On stores that are Swappers (both of
// lockgov's) each write returns the beat it replaced, stamped with its
// publisher (Heartbeat.Publisher): a beat of another publisher of this
// process makes the two siblings (and each of their siblings the other's:
// three addresses make three siblings), and from their next beats on each
// lists what all of them track; the last of them to finish its writes
// deletes the key. Until then a beat may list one publisher's half, for at
// most one interval after the second publisher's first beat. Reading the
// replaced beat needs read access to the key: a user that may only write
// it publishes with plain writes, without these checks (docs/SECURITY.md).
//
// Each beat, on a timer goroutine, its round trips to the store bounded by
// the timeout (default half the interval, at most 2s; encoding the beat is
// not charged to it; the clock samples get at most half of it, so that the
// write always has the rest, and a sample starts only while that half has
// 1.5 times the last round trip left, so that no sample is cut mid-read
// and costs the write its connection), measures the clock and writes the
// heartbeat with a TTL of three intervals (Redis SET PX; an etcd lease, rounded up to
// whole seconds and the server's minimum). Callers never wait for it: the
// skew they read (Attachment.Skew) is an atomic load.
//
// Clock offset: on Redis, ClockSamples TIME round trips, the one with the
// smallest round trip wins, offset = local midpoint - store time (error at
// most half that round trip). etcd exposes no clock: an etcd-only process
// applies the offset the agent measured from its heartbeats and wrote back
// as a TierReport (see there), and applies no tier while there is none.
// The tier (policy.SkewTiers) is ranked by the part of the offset the round
// trip cannot explain (ClockSample.Certain: offset moved toward zero by half
// the RTT), so a slow round trip on a loaded machine never puts a process in
// a tier; it is logged at most once a minute while it is degrade or reject.
//
// # Failure modes
//
// A heartbeat is written under a TTL of three intervals: a process that
// dies, or cannot reach the store, disappears from the fleet view after at
// most that long. Decode refuses values over MaxBeatBytes and cuts the lock
// lists at MaxLocks (Truncated says so), so a hostile or runaway value
// cannot exhaust the agent. The publisher never writes a beat Decode would
// refuse: it lists at most MaxLocks held and waiting entries, oldest first,
// and drops the newest of them until the encoded beat fits MaxBeatBytes
// (a process holding hundreds of locks with long keys), setting Truncated.
// A truncated beat still proves the process alive; it just does not list
// every lock, so the agent's wait-for graph may miss a cycle through the
// left-out ones until they are listed again.
//
// A beat that fails (store down, client closed) is counted in
// lockgov_fleet_heartbeats_total{result="error"} and logged at most once a
// minute; the process keeps its last measured offset. So does a beat that
// takes no clock sample: on a store whose round trip is more than a third
// of the timeout no sample after the first fits in its half, and the clock
// is measured again only once the round trip is shorter (a longer
// interval or WithTimeout gives it room). The heartbeat carries the last
// measurement with its MeasuredAt, by which readers tell an old one from
// this beat's; a kept measurement is logged at most once a minute. When
// the last attachment closes while a new one starts on the same store, the
// old publisher's delete can remove the new one's first beat: it is
// written again one interval later. Two processes configured with one
// instance name overwrite each other's heartbeat, and the agent sees one
// of them at a time: a publisher whose write replaces another process's
// beat written since its own last one logs it (at most once a minute, with
// the other's host and pid); a beat left by the name's previous process,
// found by the first write, is not logged.
package fleet
