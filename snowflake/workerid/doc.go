// Package workerid leases snowflake WorkerIDs from Redis or etcd, so that no two live
// processes ever issue IDs with the same WorkerID, and no process reuses time that an
// earlier holder of its WorkerID already used.
//
//	reg, _ := workerid.NewRedis(rdb, workerid.WithServiceRange("auth", 0, 99))
//	lease, err := reg.Claim(ctx, "auth") // pod auth-7 prefers WorkerID 7
//	defer lease.Release(context.Background())
//	gen, _ := snowflake.New(lease.WorkerID(), snowflake.WithLease(lease))
//
// # Slots
//
// A slot key per WorkerID (keyed by WorkerID, not by service, so overlapping service ranges
// collide visibly) holds a Claim: service, pod IP, hostname, pid, process start time and an
// owner token. The preferred slot is the service range's start plus the StatefulSet ordinal
// (the hostname's -N suffix); a host without one takes the first free slot. A preferred
// slot held by another live owner is a *CollisionError naming the holder, or, WithNextFree,
// the next free slot in the range.
//
// Claims are set-if-absent with a TTL: on Redis a Lua script (claim.lua) that also accepts
// the caller's own token; on etcd a transaction on create revision 0 with the key attached
// to an etcd lease (and the transaction's Succeeded flag checked). Renewal every TTL/3 is
// owner-checked as well: a script that PEXPIREs only the owner's key, never a bare EXPIRE;
// on etcd a KeepAliveOnce plus writes conditioned on the key's create revision.
//
// # Expiry and the generator
//
// A Lease implements snowflake.WorkerLease. Its ValidUntil is the send time of the last
// confirmed renewal plus TTL minus a margin (default TTL/10), on the local monotonic clock:
// the store cannot have expired the key before then, so a bound generator refuses
// (ErrWorkerLeaseLost) before anyone else can claim the slot. While the store is unreachable
// the lease keeps retrying; if the slot has vanished when the store comes back (a Redis
// restart without persistence) the same owner claims it again and the generator resumes; if
// another owner took it, the lease ends with ErrTakenOver.
//
// # High-water mark
//
// Each slot has a high-water key: the latest Unix millisecond any holder may have used. A
// claim reads it (the generator never issues at or below it) and raises it to a reservation
// of now+TTL; every renewal raises it again, and the bound generator refuses to issue past
// the reservation, so the mark always covers every ID issued, even if the holder crashes or
// its wall clock jumps forward. Release lowers it to the time actually used, so a graceful
// restart starts at once; after a crash the next holder waits (or gets
// snowflake.ErrClockBackwards) until its clock passes the reservation, which by the time the
// slot has expired it normally has.
//
// Redis keeps the high-water key for WithHighWaterTTL (default 24h) after its last write,
// under a TTL like every key lockgov creates: a host whose clock is a day behind is refused
// by the clock-skew policy long before. It lives only as long as Redis keeps data: run Redis
// with persistence or replication if restarts must not forget it (a Redis restart that loses
// it does not affect running generators, whose own state is higher). etcd keeps the
// high-water key without a lease, deliberately: there is one per WorkerID, a bounded set.
package workerid
