// Package fleet is the heartbeat every governed process publishes into the
// stores its locks and WorkerIDs use, so that the lockgov agent can tell a
// live holder from a dead one, rank clock-skew tiers, see two instances
// claiming one WorkerID, and build the fleet-wide wait-for graph in which it
// finds distributed deadlocks.
//
// This file set holds the format (Heartbeat, Encode, Decode) and the key
// layout, which the agent reads; the publisher lives beside it.
//
// Heartbeats never carry owner tokens.
//
// # Failure modes
//
// A heartbeat is written under a TTL of three intervals: a process that
// dies, or cannot reach the store, disappears from the fleet view after at
// most that long. Decode refuses values over MaxBeatBytes and cuts the lock
// lists at MaxLocks (Truncated says so), so a hostile or runaway value
// cannot exhaust the agent.
package fleet
