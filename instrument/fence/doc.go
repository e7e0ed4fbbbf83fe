// Package fence is the floor under a lock: writes to the protected resource
// that carry the holder's fence (instrument.Lease.Fence) and that the
// resource refuses once a newer holder has written. A lock is an
// optimisation; a holder that lost its lock without noticing — paused by
// the garbage collector or SIGSTOP past its TTL, cut off by a partition,
// its lock lost in a Redis failover — still runs its critical section. The
// fence makes that holder's late write fail with ErrStaleFence instead of
// overwriting the newer holder's.
//
// Three stores, one error:
//
//   - SQL (this package, database/sql): UPDATE … SET …, fence = $f WHERE
//     key = $k AND fence < $f, written for PostgreSQL; see SQL.
//   - Redis (package redisfence): a Lua script that writes a value and its
//     fence only when the fence is above the one stored, atomically; the
//     fence lives in a companion key in the value's hash slot, so it works
//     on Redis Cluster.
//   - etcd (package etcdfence): a transaction whose write applies only while
//     the etcdlock queue entry with the lease's create revision still exists.
//
// Each returns an error matching ErrStaleFence (errors.Is) whose
// *StaleFenceError (errors.As) carries the stored and the offered fence.
//
//	lease, err := locker.Acquire(ctx, "lock:account:42", instrument.WithTTL(5*time.Second))
//	if err != nil { return err }
//	defer lease.Release(context.WithoutCancel(ctx))
//	err = accounts.Update(ctx, db, 42, lease.Fence(), "balance = balance - $1", amount)
//	if errors.Is(err, fence.ErrStaleFence) {
//		// a newer holder has written: this one lost its lock; do not retry
//	}
//
// # Guarantees
//
// Redis and SQL: among writes to one key, one with fence f is applied only
// if every write applied before it had a smaller fence. Fences from one
// lock key strictly increase across holders (instrument.Lease), so a
// holder's write is refused once any later holder's write went through. It
// does not make a read-modify-write atomic: two holders that both read
// before either writes can both write, in fence order (the older first).
// Put the read and the write in one statement or script when that matters
// (as instrument/quota does).
//
// Equal fences are refused too: a lease writes a key once. Redis tells the
// same write sent again (go-redis resends a command whose reply was lost)
// from a second write: an equal fence with the stored value reports written
// and changes nothing, an equal fence with another value is refused. SQL
// refuses every equal fence: a caller that retries an Update whose outcome
// was unknown treats a StaleFenceError with Stored == Offered as "this
// lease's earlier write is the one stored".
//
// etcd: a write applies only while the lease's queue entry exists, which is
// stronger (the holder, not only an older holder, is checked) and allows
// any number of writes per lease.
//
// # Failure modes
//
// A write whose outcome is unknown (a timeout, a reset connection) returns
// the transport error; it may or may not have been applied, and the fence
// makes a retry safe: a retry either applies, or reports written (Redis,
// same value) or Stored == Offered (SQL).
// A Redis failover to a replica that missed a write loses its stored fence
// too, and a stale holder can write once more there: redisfence's
// WithReplicaAcks makes a Set that returns nil one that survives a
// failover to a replica that acknowledged it.
// Fences beyond math.MaxInt64 cannot be stored in a BIGINT column and are
// refused by SQL. Fence 0 means a lease without a fence and is refused
// everywhere.
package fence
