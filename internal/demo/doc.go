// Package demo is `lockgov demo`: the agent on an embedded etcd (and on a
// private redis-server when one is on PATH), a small workload that makes
// each kind of finding, the console URL, and a summary at the end.
//
// The workload, on etcd (the Redis half: contention and an immortal lock):
//
//   - contention: four workers take three cart keys through
//     instrument.Govern on etcdlock (and redislock), each hold a few tens of
//     milliseconds, each acquire bounded by a timeout;
//   - an immortal lock: a lock entry without a lease (a Redis key without a
//     TTL), as a crashed legacy job leaves it: a "leak" finding;
//   - a skewed instance: a heartbeat of instance billing-skewed, whose clock
//     runs 700 ms ahead (SentAt stamped by that clock, offset 700 ms): skew_reject;
//   - a WorkerID collision: two heartbeats (orders-a, orders-b) that both
//     list WorkerID 7 of service orders: workerid_duplicate (and, since
//     neither claimed the slot in the store, workerid_lease_gone for each);
//   - a deadlock: inventory-a holds lock:demo:stock:apple and waits for
//     lock:demo:stock:pear, which inventory-b holds while it waits for apple.
//     Both locks and both waits are real etcdlock acquisitions (the waits end
//     when the demo stops); the two instances' heartbeats list what each
//     holds and waits for, as fleet's publisher does for a governed process.
//
// Heartbeats of the made-up instances are written in fleet's format by the
// demo itself (one process publishes one heartbeat per store, so it cannot
// be several instances through fleet's publisher); etcd does not expose
// its clock, so the skewed instance's offset is the one its clock has.
//
// # Cleanup
//
// Everything lives under one temporary directory (the embedded etcd's data,
// redis-server's), removed at exit; redis-server runs in its own process
// group, is killed at exit, and is killed by the kernel if the demo dies
// (Linux). Run returns within a few seconds of its context ending.
package demo
