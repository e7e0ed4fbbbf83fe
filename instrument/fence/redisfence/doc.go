// Package redisfence writes Redis values guarded by a lock's fence: a SET
// that applies only when the fence offered is above the fence stored with
// the value, checked and written by one Lua script (set.lua).
//
//	w, _ := redisfence.New(rdb)
//	lease, err := locker.Acquire(ctx, "lock:stock:{sku-1}", instrument.WithTTL(5*time.Second))
//	...
//	err = w.Set(ctx, "stock:{sku-1}", "41", lease.Fence(), 0)
//	if errors.Is(err, fence.ErrStaleFence) { /* a newer holder wrote */ }
//
// # Keys
//
// The fence of value key K is stored in FenceKey(K): K+":fenced" when K
// carries a Redis hash tag ("stock:{sku-1}"), "{K}:fenced" otherwise, so it
// hashes to K's slot and the script runs on Redis Cluster. Value and fence
// share one TTL. The ":fenced" suffix differs from redislock's ":fence"
// counter, so a value may even live under the lock key's hash tag.
//
// # Replica acknowledgements
//
// By default Set returns once the primary has the write, which Redis
// replicates afterwards. WithReplicaAcks(n, timeout) makes a Set that
// writes wait until n replicas have it: set.lua, a write of the fence key
// that changes nothing (a resend that finds its own write stored writes
// nothing itself, and WAIT is documented to count only its connection's
// writes), and WAIT n timeout go in one pipeline on one connection. A
// failover to one of those replicas keeps the value and its fence, so a
// stale holder is refused there
// (TestReplicaAcks_AnAcknowledgedWriteSurvivesFailoverAndRefusesTheStaleFence).
// Single node and Sentinel (*redis.Client) only; the timeout must leave
// 250ms under the client's ReadTimeout (Redis answers a WAIT that timed
// out at its next timer tick), and a caller's deadline shorter than the
// timeout cuts it.
//
// When fewer than n replicas acknowledge within the timeout, Set returns
// an error holding a *NotReplicatedError (errors.Is: ErrNotReplicated;
// with context.DeadlineExceeded too when the caller's deadline cut the
// WAIT, or passed before its reply arrived: then 0 acknowledged, and the
// text says the count is unknown, never the read's i/o timeout as a store
// failure). The value and its fence are on the primary: a failover that
// promotes a replica without them loses them, nothing else does. Retry
// with the same fence and value: it reports written, changing nothing,
// and returns nil once the replicas have it (on a promoted replica that
// lost it, it writes it again). A WAIT whose reply is lost after set.lua
// answered (a broken connection) is ErrNotReplicated with the transport
// error, without a *NotReplicatedError: the counts are unknown. Only when
// set.lua's own reply is lost is the error a bare transport error, as
// without the option.
//
// A refused Set is a *fence.StaleFenceError whatever the replicas say: it
// is not waited for. The refusal is read on the primary from a stored
// fence above the offered one (or an equal fence with another value),
// which says a newer lease was granted (or this lease already wrote): a
// fact of the lock, not of the store, that no failover undoes, so the
// caller has lost its lock however the replicas answer, and reporting
// ErrNotReplicated would only hide that. Whether the newer holder's write
// survives a failover is what that holder's own Set confirms. A refusal
// still spends the WAIT in its pipeline, which is sent before set.lua's
// answer is known: up to the timeout while replicas lag.
//
// What it leaves open: a write that Set reported as ErrNotReplicated (or
// a transport error) can be lost by a failover, and until its holder
// retries, a stale holder can write there once more, as any stale write
// that reaches the store before the newer holder's first write (which no
// fencing refuses). WAIT does not make Redis strongly consistent: a
// failover may still promote a replica that did not acknowledge (Sentinel
// prefers the most up-to-date one), the primary does not count a replica
// for about a second after it (re)connects, and WAIT makes nothing
// durable on disk. Every writing Set pays the replicas' round trip, and
// while fewer than n replicas answer each waits the whole timeout. Get
// does not wait.
//
// # Failure modes
//
// go-redis resends a Set whose reply was lost (a read timeout, a reset
// connection) on another connection, after it may have run: a resend finds
// its own fence and value stored and reports written, so Set returns nil
// for a write that was applied. A resend that comes after a newer holder
// wrote is refused (StaleFenceError, Stored the newer fence) and leaves the
// newer value: the first run applied, and the lease has moved on since. A
// Set that still fails returns the transport error; retrying it with the
// same fence and value either writes or reports written, the same fence
// with another value is refused (StaleFenceError with Stored == Offered),
// and after a newer holder's write it is refused as above.
//
// A Redis that lost writes (a failover to a replica that missed them, a
// restart without persistence) lost the stored fence with them: by
// default a stale holder can then write once more, over the value of the
// write it lost, until a newer holder writes again
// (TestFailover_DefaultLetsAStaleHolderWriteOnceMore). WithReplicaAcks
// closes the failover half for every write Set reports as nil (see
// "Replica acknowledgements"); a restart without persistence is closed
// only by persistence that loses no acknowledged write (appendonly yes,
// appendfsync always), or by keeping fenced data in SQL (fence.SQL).
//
// WithReplicaAcks keeps nothing across a restart of the primary without
// persistence: a primary that comes back empty before a failover (a crash
// and an automatic restart, faster than Sentinel's down-after-milliseconds)
// has a new replication ID, and every replica that reconnects to it takes
// a full resync and drops what it had, so the fences of Sets that returned
// nil, acknowledged, are gone from the primary and from the replicas that
// acknowledged them. Until each key's next write, the first Set under any
// fence is accepted, and acknowledged (nil) once the replicas follow the
// empty primary: a stale holder writes once more, as above
// (TestReplicaAcks_APrimaryRestartedEmptyWipesTheAcknowledgedFence). What
// keeps an acknowledged write is a failover that promotes an acknowledging
// replica before the old primary returns (it then resyncs from the new
// one); Redis's replication guide says not to restart a primary without
// persistence automatically for this reason.
//
// Eviction deletes the stored fence the same way: a Set with a ttl makes
// value and fence candidates under every maxmemory-policy but noeviction
// (volatile-lru is AWS ElastiCache's default), a Set with ttl 0 under the
// allkeys-* policies. With the fence evicted the key reads as never written,
// and the next Set is accepted whatever its fence: a holder whose lock was
// taken over writes over (or beside) the newer holder's value
// (TestEviction_AnEvictedFenceAcceptsAStaleWrite). WithReplicaAcks does not
// help: the replicas evict with the primary (they replay its DELs). Keep
// fenced data in a Redis with noeviction; the agent reports one with
// eviction on (detector "store", kind eviction_enabled).
package redisfence
