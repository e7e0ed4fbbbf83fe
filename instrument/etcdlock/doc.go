// Package etcdlock is lockgov's etcd lock backend: a lease per lock with
// keepalive as the watchdog, waiters served in revision order (fair, FIFO),
// and the lock key's create revision as the fence.
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: endpoints})
//	locker, err := etcdlock.New(cli, etcdlock.WithService("payments"))
//	...
//	err = instrument.Do(ctx, instrument.Govern(locker), "lock:quota:42", func(ctx context.Context) error {
//		return deduct(ctx) // ctx ends if the lock is lost
//	})
//
// # How a lock works
//
// Every Acquire runs on an etcd lease of its own (so one Locker is safe for
// concurrent use: goroutines never share a queue entry) and puts one entry,
// attached to that lease, under the key's queue prefix
// "<prefix><key>\x00" (the NUL cannot occur in a valid key, so "a" and
// "a/b" never share a queue). The entry's name is the prefix followed by
// the lease ID in 16 hex digits. The holder is the entry with the lowest
// create revision; Fence() is that create revision, which etcd keeps
// strictly increasing across the whole store, so fences of successive
// holders of a key strictly increase and never repeat, even after the key
// was idle (no per-key counter exists to expire).
//
// Waiting (WaitUntilDeadline, the default) queues, and waiters acquire in
// the order they queued. How a waiter learns its turn depends on the length
// of the queue ahead of it when it queues.
//
// With at most 16 entries ahead (the common case: a handful of instances
// contending), the waiter watches the whole queue prefix: one watch delivers
// every deletion in the queue, its own included, in revision order. After one
// read of the entries ahead of it (at a revision the watch covers from), it
// strikes them off as their deletions arrive; the deletion that strikes off
// the last one is its turn, with nothing left to read: at that revision no
// older entry was left and its own entry existed, since a deletion of its
// own would have come first in the same stream, and entries created later
// are never ahead of it. A contended handoff therefore costs the holder's
// delete and one watch event. The price is that each deletion in such a
// queue reaches every waiter's watch (at most 16, and none sends a request
// because of it).
//
// With a longer queue, each waiter watches only its predecessor's entry, as
// etcd's concurrency.Mutex does, and re-checks when it is deleted, so a
// release wakes exactly one waiter. The re-check is one read-only
// transaction (a linearizable read, no raft write): its own entry still
// exists with its create revision and no entry older than its own is left.
// The predecessor's deletion alone does not say so: older entries may remain
// (the predecessor gave up), and its own entry may have been deleted before
// the predecessor's (its lease revoked, or expired while the process was
// paused) without its own-key watch having told it yet; taking over then
// would make two holders. Such a handoff costs the holder's delete, one
// watch event and one read. A waiter whose queue watch fails (no leader,
// compaction) continues this way too, and one whose read fails (no leader,
// a lost connection) keeps its place and reads again after a back-off
// (20 ms doubling to 500 ms, with jitter), or sooner at the next event or
// poll: the failed read may have been the one its turn asked for, and no
// event need follow it. If its deadline ends the wait while reads still
// fail, the error names the last failed read. Closing the Locker's client
// ends every wait at once, with ErrNotAcquired saying so (clientv3 alone
// would retry each request for seconds first).
//
// Both watches start at the current revision, which etcd serves as a synced
// watcher (a watch from an older revision is parked as unsynced and is only
// delivered by etcd's 100 ms resync, which is why stock concurrency.Mutex
// manages about 80 handoffs a second). The current revision is the serving
// member's: if it is past the revision of the waiter's read, the waiter
// re-checks (or reads the queue after the watch is created), so no release
// is missed; if the member lags behind (a follower that has not applied the
// latest writes yet), the watch replays events the read already covered,
// and the waiter ignores them. The poll interval (WithPollInterval) is only
// a fallback. FailFast and Retry never queue: each attempt puts an entry
// only if the queue is empty.
//
// A released lock's lease is kept by its Locker (at most 8 per TTL) and
// reused by a later Acquire with the same TTL while two thirds of its TTL
// are left, saving a grant and a revoke per lock; idle leases are not kept
// alive and expire on their own. Ownership is always checked by the entry's
// create revision, never by the lease ID, so reuse cannot confuse holders.
// A reused lease gives the new entry the name of its previous one on the same
// key; the watches on an entry (a holder's own, a waiter's predecessor or
// queue) only count a deletion after the revision they know the entry
// existed at, so that the old entry's deletion, replayed by a lagging
// member, is neither a loss nor a handoff. Acquire never returns a lease
// whose local deadline (below) has passed.
//
// The value of an entry is JSON that the agent reads: service, instance,
// pid, trace_id, labels, queued_at_ms and (once held) acquired_at_ms. A lock
// taken without waiting has acquired_at_ms from its first write; a waiter
// that takes over records it (the instant it took over) from its lease's
// background goroutine once it has held the lock for 100 ms, so the handoff
// does not wait for that write and a shorter critical section, over before
// any hold-time rule could apply, costs etcd no write for it. The fence is
// the key's create_revision. Lease IDs are never in metrics, logs or spans.
//
// # TTL, watchdog and loss
//
// etcd leases have whole-second TTLs: the lock TTL is rounded up to whole
// seconds, at least 1 s, and the server may raise it further to its minimum
// (1.5 x the election timeout). The watchdog renews the lease with a
// keepalive every third of the granted TTL, from the grant on (a waiter's
// lease must outlive its wait); it stops at Release, at max hold (the lease
// then expires) and, with WithoutWatchdog, once the lock is held (such
// leases are always freshly granted, so the TTL counts from the grant).
//
// Lease.Context() ends with ErrLockLost when the lock key is deleted by
// anyone (seen by a watch on the key; a lock taken without waiting starts
// that watch 100 ms after it was taken, and the read that follows the
// watch's creation catches a deletion in between: short critical sections,
// most of them, never pay for a watch, which had made an uncontended
// acquire + release twice as slow as concurrency.Mutex's; docs/BENCHMARKS.md),
// when a keepalive finds the lease gone,
// and at the latest when local monotonic time passes the last confirmed
// expiry (send time of the confirming keepalive + TTL) minus a drift margin
// of 2 ms + 2% of the TTL. A keepalive that fails for a transport reason is
// retried every twelfth of the TTL until then. Release deletes the key only
// if its create revision is still ours (ErrNotHeld otherwise) and gives the
// lease back to the pool or revokes it; a second Release returns ErrNotHeld.
// A lease dropped without Release is released when the garbage collector
// finds it (Observer.Leaked). This lifecycle is the one every lockgov lock
// shares (instrument/internal/leasecore); etcdlock supplies the keepalive,
// the owner-checked delete and the key watch.
//
// A waiter whose own lease ends (expired while etcd was unreachable, or its
// entry deleted, seen by its watch or at the handoff's confirmation) stops
// waiting with an error wrapping ErrLockLost; a waiter whose context ends
// withdraws its entry (at once, or in the background when etcd does not
// answer within 100 ms: see Failure modes) and returns ErrNotAcquired
// wrapping the context's cause.
//
// Release is one owner-checked delete. clientv3 never re-sends a write
// transaction that may have reached etcd (it retries a Txn only when the
// request could not be sent), so a release cannot find its own earlier
// delete and report ErrNotHeld for it: ErrNotHeld means the key was not ours
// when the release ran. A release whose delete fails (its reply lost, etcd
// out of reach, or the release's context ended) returns that error, ends
// the lease with ErrLockLost and revokes the lease, which deletes the key
// if the delete did not run; a revoke that does not get through on the
// release's context is tried again in the background (see Failure modes).
// So is the revoke of a release whose context ended while it waited for a
// keepalive in flight (it returns at once, and revokes once the keepalive
// has returned), or for the key watch to stop after its delete went
// through (the lease, with nothing attached, is not pooled then).
// instrument.Do reports that error, not ErrLockLost, because fn finished
// while the lock was held.
//
// # Failure modes
//
// A leader change does not end leases: a new leader gives every lease its
// TTL again plus an election timeout (its whole TTL: etcd remembers a
// lease's remaining TTL across a leader change only with lease
// checkpointing, off by default), so a lease can outlive its holder's last
// keepalive by up to about two TTLs across an election, and no lease
// expires while there is no leader. While no leader is reachable keepalives
// fail; the holder's context ends at its local deadline, before etcd could
// expire the lease and hand the lock to someone else. A holder whose lease
// ends so (or whose key was deleted, or whose keepalive found the lease
// gone) gives the lease back without waiting for its Release: it is
// revoked in the background like an Acquire's that gave up (below), since
// etcd gives it its whole TTL again once a leader is back, and its entry
// would keep the lock from every waiter for that long. Watches use
// WithRequireLeader, so a member cut off from the leader does not leave them
// silently stalled.
//
// An Acquire that fails revokes its lease, fresh or pooled, whatever
// failed: the attempt that put its entry may have been applied although no
// reply said so (the reply lost as the caller's context ended, or as the
// connection broke), and the revoke deletes the entry with the lease. The
// caller's deadline bounds that cleanup too: the revoke runs inline while
// the caller's context has time left (at most 2 s) or for 100 ms after it
// ended, and a watch that etcd has not confirmed yet does not hold the
// waiter either, past its context or past the end of its own lease (a
// waiter whose lease expired while etcd was unreachable stops then, with
// ErrLockLost). So while etcd cannot be reached or has no leader, an
// Acquire whose context ends returns about 100 ms later, not after a
// cleanup that cannot get through; with a healthy etcd the revoke is done
// by then and the entry gone when Acquire returns. When the revoke does not
// get through in that time (the connection that lost a reply is often
// broken for the requests that follow; a waiter gives up during a
// partition), or when a Release's delete and revoke did not, the lease is
// revoked in the background: one revoke in flight per Locker, every 50 ms
// doubling to 1 s (jittered), until etcd revokes the lease or no longer
// knows it, or the client is closed, however long that takes: no lease
// expires while etcd has no leader, and the leader elected after an outage
// gives every lease its whole TTL again, so the entry may still stand when
// etcd is back. At most 4096 leases per Locker are kept; past that a lease
// ends at its TTL. Without it the entry would stand, the lock or a place
// ahead of every later waiter taken by nobody, for the lease's whole TTL.
// A lease grant whose reply is lost leaves a lease with nothing attached,
// which expires at its TTL.
//
// Until its revoke gets through, the entry of an Acquire that gave up
// stands like any other, and it is never pooled. Waiters queued behind it
// keep waiting, this Locker's included (a later Acquire of the same key
// runs on a lease of its own and queues behind it); once the entries
// before it are gone it is the oldest, which other Lockers and the agent
// take for the holder (its value has no acquired_at_ms), so nobody is
// granted the lock and FailFast and Retry find it taken. Its deletion then
// wakes the next waiter as a release does. Once etcd answers again, the
// queue waits for the revoker to catch up: its revoke in flight gives up
// within 2 s, the next round follows within 1 s, one lease at a time.
//
// # Store failure
//
// clientv3 sends every request with WaitForReady: while no connection to
// the cluster is ready (members down, a partition) a request waits until
// its context ends, and the client's DialTimeout bounds clientv3.New only.
// So each round trip an Acquire makes runs on a bound of its own, the
// request timeout (WithRequestTimeout, default DefaultRequestTimeout, 5 s,
// as etcdctl's --command-timeout): the lease grant, the transaction that
// puts the entry (each attempt of FailFast and Retry), each read of the
// queue while it waits, and the creation of each watch it waits on (etcd
// confirms a watch only over a ready connection). The wait itself, on a
// watch for the entries ahead to go, is not bounded: it lasts as the wait
// strategy says. When the bound ends a round trip while the caller's
// context still has time, or etcd answers one with codes.Unavailable (no
// leader, leader changed, request timed out, also due to a leader's
// failure: etcd could not decide it), the Acquire fails with an error that
// instrument.Govern reads as a store failure (see instrument, "Store
// failure": FailClosed returns it, FailOpen falls back to a process-local
// lock) and that wraps etcd's answer (errors.Is(err, rpctypes.ErrNoLeader))
// but not the bound's deadline, and it is not ErrNotAcquired: nobody was
// found holding the lock, as with a redislock transport error. Its message
// names the endpoints, never the key. Reads while waiting are the
// exception to "at once": a waiter keeps its place through failed reads (a
// leader election is often over in a second, and clientv3 retries a read
// through it until the bound) and ends the wait only once its reads have
// failed for a whole request timeout without one that worked. An answer
// that refuses the request (permission denied, a compaction) is no store
// failure, however soon or late within the request timeout it comes. The
// caller's own end is always ErrNotAcquired with its cause, whatever the
// request then said. WithRequestTimeout(0) leaves only the caller's
// context as before; etcd's Unavailable answers still count. FromMutex
// takes WithRequestTimeout too, off by default there, and probes etcd
// while concurrency.Mutex.Lock waits instead of bounding its round trips
// (see MutexLocker, "Store failure").
//
// A put whose reply the bound cut short may have been applied: its entry
// stands, holding the lock or a place in the queue. The Acquire revokes its
// lease as after any failure (inline for at most the request timeout, when
// that is below the 2 s such a cleanup has, then in the background until
// etcd answers), and nobody renews it, so it goes once this process reaches
// etcd again, or at its TTL if only this process is cut off; until then it
// holds up the others as a waiter that gave up does (above). Govern never
// lets a process-local lock overlap a store lease of its own process: it
// was never handed out, and a valid lease taken before the outage excludes
// the fallback Acquires of its key until it ends. A waiter whose session
// lease (TTL) runs out before its reads have failed for the request
// timeout stops with ErrLockLost, not a store failure: keep the TTL above
// the request timeout plus the poll interval.
//
// A lock's queue is every key under "<prefix><key>\x00" (QueuePrefix), not
// only the names etcdlock writes there (one NUL, then the 16 lower-case hex
// digits of a lease: ParseQueueKey). Another writer's key under it,
// "<key>\x00other", is a holder or a waiter by its create revision, as any
// key under its prefix is to etcd's concurrency.Mutex: FailFast and Retry
// find the lock taken while it is there, waiters queue behind it, and its
// deletion (or its lease's end) hands the lock on like a release. Decided,
// not fixed: an etcd transaction compares and watches a range of keys, not
// a pattern of names, and no range holds exactly the 16-hex-digit names
// (the range of "<key>\x000" to "<key>\x00g" holds "<key>\x00fx" too), so
// ignoring such keys would make the one-transaction check of an empty
// queue and the read of who is ahead disagree. etcdlock writes nothing
// else under a queue prefix: its only entries are the queue entries, and
// instrument.ValidateKey refuses a key with a NUL, so no lock's entries
// fall under another lock's queue prefix; FromMutex's Mutex keys are
// "<pfx><key>/<lease hex>", under no queue prefix either. The agent reports
// such a key as a lock of its own and says which lock it holds up
// (detectors, "Failure modes").
//
// FromMutex adapts code that already uses concurrency.Mutex. Its leases
// run on the same lifecycle and have the same loss signals (key watch,
// keepalive, local deadline from the last confirmed keepalive of the
// session lease, and the end of the session), re-establish a key watch
// that etcd ends (compaction, no leader) after reading the key, and never
// leave a Mutex key behind when Acquire fails after it may have written one
// (a lock that succeeded just before the context ended): the session's
// keepalive would keep that key, and the lock, until the session ends. That
// cleanup, and the delete of a Release on a context that has already
// ended, run inline only while the caller's context has time left or for
// 100 ms after it ended, as the Locker's revoke does. If etcd does not
// answer in that time, or a Release's delete fails, the key stays until a
// retry in the background deletes it (or the session ends), and the adapter
// keeps the key's in-process turn until then. A waiting Acquire returns
// then even though concurrency.Mutex.Lock has not: after a failed wait it
// deletes its key on the client's context, which a half-open connection
// holds until the client is closed; the turn is kept until it returns. A
// lost FromMutex lease keeps its in-process turn until Release (or until
// the garbage collector finds it dropped): its key may still stand, and
// another goroutine of the session would re-enter it with the same fence.
// See MutexLocker.
package etcdlock
