// Package redislock is lockgov's Redis lock backend, for single nodes,
// Sentinel and Cluster through redis.UniversalClient, and for a quorum of
// independent primaries (NewQuorum).
//
//	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//	raw, err := redislock.New(rdb, redislock.WithService("billing"))
//	locker := instrument.Govern(raw, instrument.WithRegisterer(reg))
//
// # Modes and their options
//
// A Locker runs in one of three modes, chosen by its constructor: one node
// (New), one node handing the lock out in order (New with Fair), or a
// majority of independent nodes (NewQuorum). Each constructor has its own
// option type, so an option that does not apply to a mode does not
// compile rather than being ignored:
//
//	option              New (Option)   NewQuorum (QuorumOption)
//	WithService         yes            yes   (CommonOption)
//	WithInstance        yes            yes   (CommonOption)
//	WithFenceRetention  yes            yes   (CommonOption)
//	WithIdleTimeout     yes            no    (quorum waiters poll)
//	Fair                yes            no    (needs one queue)
//	WithWaiterTimeout   with Fair      no
//	WithReplicaAcks     yes (not on    no    (independent primaries)
//	                    Cluster/Ring)
//	WithDriftFactor     no             yes
//	WithNodeTimeout     no             yes
//
// What the types cannot say is a constructor error wrapping
// instrument.ErrInvalidOption: WithWaiterTimeout without Fair,
// WithReplicaAcks on a Cluster or Ring client, and values out of range.
//
// # What one lock costs
//
// Acquire is one EVALSHA of acquire.lua: set-if-absent with PX and the owner
// token, and the next fence from a per-key counter in the same hash slot,
// atomically. Release is one EVALSHA of release.lua: compare the owner token,
// leave a short-lived tombstone for the token, and hand the lock to the
// first waiter queued for it (see "Waiting: the handoff") or DEL it.
// Refresh is one EVALSHA of refresh.lua:
// compare the owner token, PEXPIRE. Never GET-then-DEL (which deletes the
// next holder's lock when the first one ran past its TTL) and never a bare
// EXPIRE (which extends whoever holds the key now). The fast path is the
// same two round trips as a hand-written SET NX PX + EVALSHA pair.
//
// # Automatic pipelining
//
// The acquire and release scripts of one Locker's concurrent calls share
// pipelines: while three sends to a node are under way, further calls queue,
// and the first send to finish takes the queue as one pipeline, sent by the
// oldest queued call (no goroutine of its own; with one goroutine, or little
// concurrency, every call is a plain command, exactly as before). Most of
// what a lock costs the server is per round trip, not per script, so
// sixteen goroutines taking sixteen locks pay for a few round trips instead
// of sixteen (docs/BENCHMARKS.md: the bare pair 0.71x -> 0.99x a raw SET NX
// PX + EVALSHA pair at 16 goroutines). What a caller sees: a call still
// queued when its context ends returns the context's error and its command
// is never sent; a call whose command is in a batch waits for the batch (the
// client's read and write timeouts bound it, and the batch runs under the
// latest deadline of its calls; with WithReplicaAcks its WAIT is cut to
// the earliest, and a call whose deadline would cut it is sent alone) and
// its result stands; a failed pipeline
// fails each of its calls with the transport error; go-redis's hooks see a
// pipeline (ProcessPipelineHook) for batched calls, a plain command
// (ProcessHook) otherwise (with WithReplicaAcks, a pipeline of the script
// and WAIT). Retries of a pipeline re-send every command in
// it, which the scripts tolerate as they tolerate any retry (an acquire
// recognises its own token, a release its own tombstone, which lives as long
// as the batch can be resent, not only its own call).
//
// # Keys
//
// A lock on key K uses K itself (value "<token> <fence> <json metadata>",
// readable by the agent), a fence counter and notification channels that
// hash to K's slot: K+":fence" and K+":released:<locker id>" when K has a
// hash tag, "{K}:fence" and "{K}:released:<locker id>" otherwise (each
// Locker has its own channel per key, named by 16 random hex digits of its
// own, so that a handoff wakes one process). While waiters wait, the waiter
// queue K+":queue" and the waiter deadlines K+":waiters" ("{K}:queue",
// "{K}:waiters"), both under a TTL of twice the waiter timeout plus the
// lock TTL, re-armed by every waiting attempt. Keys with braces that do not
// form a hash tag are refused. A release leaves a tombstone K+":rel:<hash of
// the token>" (or "{K}:rel:…") under PX for as long as the release call can
// be retried (its context's deadline, or its batch's when later, plus a
// second; at most a minute).
//
// Fences strictly increase per key without a key that lives forever: every
// acquire attempt (in Fair mode only one that acquires: a failed Fair
// attempt reads the counter without writing it) sets the counter to
// max(counter + 1, the Redis server's clock in microseconds) and returns
// that, the counter under a TTL of TTL + retention (WithFenceRetention,
// default 10 minutes) re-armed on each such attempt. The counter moves by
// one per acquisition while the clock moves by a million a second, so
// fences follow the server clock; the counter keeps them increasing within
// one microsecond and across a clock step back of less than its lifetime.
// This needs Redis 6.2 or later (SET ... GET).
//
// # Fences after a failover or a lossy restart
//
// A replica promoted before it had every write, a restart from an older RDB
// snapshot, or a crash under appendfsync everysec brings back a counter that
// is present but older than fences already issued. The next fence is still
// above every fence the server issued before it lost them, because it is at
// least the server clock now, and each of those was at most the issuing
// server's clock then. That needs two things: server clocks that do not step
// back (NTP slewing, not stepping), and on failover the new primary's clock
// not behind the old primary's by more than the failover took (hosts
// synchronised to well under a second; a Sentinel failover takes seconds).
// A clock stepped back further, or a replica whose clock lags the old
// primary's by more than the failover time, can repeat a fence.
//
// # Waiting
//
// WaitUntilDeadline waiters of one Locker queue in-process per key, and only
// the head contends in Redis (not in Fair mode: see there). It subscribes
// to its Locker's release channel of the key,
// queues in Redis for a handoff (below), and retries when the holder's TTL
// runs out (expiry hands nothing over), at the poll interval or a third of
// the waiter timeout (5s, DefaultWaiterTimeout) as a last resort, and when
// its pub/sub connection was lost. Retry and FailFast callers go to Redis
// directly and never queue.
//
// # Waiting: the handoff
//
// A release hands the lock over inside release.lua, in the round trip of
// the release itself: it pops the first live entry of the key's waiter
// queue, writes the lock value that waiter's own acquire would have written
// (its token, TTL and metadata, which the entry carries, and a fresh fence),
// and PUBLISHes "<waiter id> <fence>" on the channel of the waiter's
// Locker (the entry names it), the id being 24 hex digits of the SHA-1 of
// the waiter's token (the token never goes on a channel). Only that process
// and that waiter wake, and it already holds the lock: no acquire round trip,
// no herd of waiters running acquire.lua to fail, and the releasing
// goroutine, asking again at once, cannot take the lock back first (it
// queues behind the others). Waiters get the lock in the order they queued,
// in both modes.
//
// What keeps it safe:
//
//   - The lease counts from when the waiter's last attempt was sent, not from
//     when it heard of the handoff. The handoff ran after that attempt (had
//     it run before, that attempt would have found the lock this token's),
//     so the key lives at least a TTL from then. A notification that arrives
//     more than a third of the TTL after that attempt is not trusted for the
//     timing: the waiter runs acquire.lua, which finds the lock its own and
//     re-arms the TTL, and counts from that attempt.
//   - A notification older than the waiter's last attempt is ignored: every
//     attempt reports a fence at least as large as any issued before it
//     (the fence it consumed; in Fair mode, where a failed attempt writes
//     no fence, the larger of the counter and the server clock), and a
//     handoff after it carries a larger fence. The clock is what makes this
//     hold once the counter expired under a long holder.
//   - A lost notification (pub/sub reconnecting) costs time, not the lock:
//     the waiter's next attempt finds the lock its own. A pub/sub
//     connection that goes half-open (no reply to its health check's PING,
//     every 2s while anyone waits) is replaced within about 4s, and every
//     waiter tries again then.
//   - A waiter that gives up leaves the queue (leave.lua); if a release had
//     handed it the lock before it heard, leave.lua hands the lock on in
//     turn. The leave is a round trip of its own, bounded by a second, not
//     by the waiter's context, which has ended: it runs in the background
//     (Close waits for it), so that Acquire returns by its deadline. A
//     leave that fails (Redis out of reach) is tried again, backing off to
//     a second between tries (each wait jittered within [d/2, d], as the
//     pub/sub reconnections', so that many waiters that gave up in one
//     outage do not retry in step), until it runs or no longer matters (the
//     waiter timeout plus the TTL after giving up) or Close; an error
//     reply ends it too, unless it says Redis is not serving now (BUSY,
//     LOADING, READONLY and the like). A
//     waiter that died without leaving is skipped once its deadline (the
//     waiter timeout after its last attempt) passed; one that died less
//     than that before a release is handed the lock, which then stays unused
//     until its TTL runs out: the price of a handoff, bounded by waiter
//     timeout + TTL, and only for a process killed while it waited.
//   - Fences stay monotonic: the handoff takes its fence from the same
//     counter as acquire.lua (max(counter + 1, server µs)).
//   - A release that go-redis retries after a lost reply finds the lock the
//     next holder's and its own tombstone: it reports success and hands
//     nothing over twice.
//
// Retry and FailFast callers never queue: while deadline waiters queue on a
// key, every release goes to one of them, and a retrying caller gets the
// lock only when nobody queues (or it expired).
//
// A waiter that finds the key's channel subscribed already (the key was
// contended lately) queues on its first attempt, so a contended
// acquisition costs two commands in all: the queuing attempt and, later,
// the holder's release.
//
// A Locker has at most one pub/sub connection, shared by all its waiters.
// The first wait opens it; it stays open while waits keep coming and closes
// when nobody has waited for the idle timeout (WithIdleTimeout, default
// 30s), or at Close. A key's channel also stays subscribed for the idle
// timeout after its last waiter left (at most 256 such idle subscriptions
// per Locker), so a contended key costs neither a new connection nor a
// SUBSCRIBE per Acquire. One goroutine reads the connection and one writes
// to it (SUBSCRIBE, UNSUBSCRIBE, PING, and the dial of a new connection): a
// waiting Acquire never waits for those, which take the client's dial, read
// and write timeouts, but only for its own context. Close a Locker when done
// with it; tests that check for leaked goroutines must, since the
// connection's goroutines outlive Acquire.
//
// # Fair mode
//
// Without Fair, waiters already get the lock in queue order by the
// handoff, but a caller that does not wait (FailFast, Retry), or a waiter's
// first attempt, takes a lock that is free whoever queues. With Fair,
// every caller queues in Redis in the order it asked, the lock goes only
// to the head of the queue, even when it is free (expired, or left by a
// waiter that gave up: leave.lua then hands it to the next), and a FailFast
// caller gets nothing while anyone queues. A waiter that has not retried
// for the waiter timeout (WithWaiterTimeout, default 5s) is skipped. Every
// Locker on a key must agree on Fair.
//
// Fair waiters do not take turns in-process: every deadline waiter queues
// in Redis itself, those of the holder's own Locker too. A waiter held back
// behind its Locker's holder or first waiter would reach the Redis queue
// only when they were done, behind every caller of another Locker that
// asked meanwhile. This costs no herd, since a release wakes only the
// waiter it hands the lock to (by name, on its Locker's channel); what it
// costs is one queue entry per waiting goroutine, each re-armed by an
// attempt every third of the waiter timeout, where the default mode has one
// per Locker and key.
//
// # Quorum mode
//
// NewQuorum spreads each lock over N independent primaries, Redlock-style:
// held when a majority granted it within TTL minus elapsed time minus drift
// (WithDriftFactor), released and renewed on every node, lost when a
// majority can no longer confirm it. When fewer than a majority of nodes
// answer, nothing is decided and Acquire returns at once rather than at
// the deadline:
//
//   - with a transport error (not ErrNotAcquired), as a single Redis that
//     cannot be reached gives, when so many nodes were out of reach (a
//     refused or reset connection, LOADING and the like, no answer within
//     the node timeout) that the others cannot make a majority. So too when
//     the nodes that answered said another owner holds the lock: a
//     minority's answers say nothing of the majority. Govern counts it as
//     result error and, under FailOpen, falls back to a process-local lock;
//   - with an error that is neither ErrNotAcquired nor a transport error
//     when error replies (OOM, NOPERM) kept a majority from answering: the
//     store's answer, as the same reply is from a single Redis;
//   - with ErrNotAcquired and the context's error when the caller's context
//     ended first.
//
// When a majority answers but fewer than a majority grant (another owner
// holds the lock on some of them), the lock is held: Acquire waits, or
// returns ErrNotAcquired, as its wait strategy says, whatever the other
// nodes did. A node that still has this Acquire's token from an earlier
// attempt (its reply lost to the node timeout) counts as a grant only after
// it re-armed the TTL, so the validity counted from the later attempt holds
// on every node of the majority. It is an efficiency lock, not a
// correctness lock: see NewQuorum for what Fence means in this mode.
//
// # Lease lifecycle
//
// The lifecycle is lockgov's shared lease core (the same as etcdlock's); this
// package supplies the owner-checked refresh and release scripts. A
// watchdog timer renews at TTL/3 (a renewal runs on the timer's own
// goroutine only when it fires) with the owner-checked script, until
// Release, until max hold (then the lease expires), or until a renewal
// proves the lock gone. Independently of any call in flight, a timer cancels
// Lease.Context() with ErrLockLost at the last confirmed expiry minus a drift
// margin (2 ms + 2% of the TTL; in quorum mode 2 ms + the drift factor times
// the TTL), measured from when the confirming request was sent; Redis
// cannot expire the key before that moment, so the holder knows it lost the
// lock before anyone else can take it. A loss is reported to the observer
// (Govern's metrics) before the context ends. Nothing of a lease runs after
// Release or loss. A lease handle dropped while held is released when the
// garbage collector finds it.
//
// # Replica acknowledgements
//
// With one primary and asynchronous replicas (Sentinel, a managed Redis
// with failover), a lock written to the primary and lost with it before it
// reached a replica is absent on the replica promoted in its place, and a
// second caller takes it while the first still holds it.
// WithReplicaAcks(n, timeout) narrows that window, as Redisson's "sync
// slaves" do: every acquire and renewal script is followed by WAIT n
// timeout in one pipeline on the same connection (WAIT counts the replicas
// that acknowledged that connection's writes, so it must follow the script
// there; when the combiner batches concurrent calls, one WAIT ends the
// batch and covers every command before it). It needs a *redis.Client: one
// node, or Sentinel through redis.NewFailoverClient. New refuses it on a
// ClusterClient or Ring, which split a pipeline by slot and send a keyless
// WAIT to a node of their choosing, and NewQuorum does not take it.
//
//   - Acquire: when fewer than n replicas acknowledged the lock within
//     timeout, the lock is given back at once (leave.lua, owner-checked, in
//     the background, as the lock of an attempt whose reply was lost) and
//     Acquire fails, whatever its wait strategy, with an error holding a
//     *NotReplicatedError (Acked, Wanted, Timeout; errors.Is matches
//     ErrNotReplicated). Govern's metrics have no failure-reason label:
//     it counts the failure as any store failure (lockgov_lock_acquire_total
//     result="error" under FailClosed, lockgov_store_degraded_total under
//     FailOpen), and the acquire span's recorded error carries the message
//     with the counts. Decided: it is a
//     store failure for instrument.Govern (marked as storefail marks an
//     unreachable quorum): the primary answered, but the store cannot give
//     the lock it was asked for, as when it is down. Under FailClosed (the
//     default) Acquire returns it; under FailOpen Govern falls back to a
//     process-local lock and counts it in lockgov_store_degraded_total,
//     which pages: a caller that chose availability keeps it while a
//     replica is down, and operators hear of it. A call sent on its own
//     never has its WAIT outwait its deadline: the WAIT is sent with the
//     timeout, or with what the context's deadline leaves less 250ms for
//     the reply when that is less (at least 1ms), so that its reply, not
//     the deadline, ends the pipeline (a read cut by the deadline drops the
//     connection, and without ContextTimeoutEnabled nothing would cut it).
//     Nor does a call sent in a combiner batch (more than three sends of
//     the Locker in flight), whose reply comes after the batch's one WAIT:
//     a call whose deadline leaves less than the timeout plus 250ms when
//     the batch is formed is not put in it but sent on its own (its WAIT,
//     if it asks for one, cut to its own deadline), and the batch's WAIT is
//     cut to what the earliest deadline of the calls left in it leaves
//     when it goes out (less than the timeout only by the time it took to
//     go out; a call whose own deadline did not cut it and too few
//     replicas answered fails as a store failure). Decided: an
//     Acquire whose WAIT was so shortened and too few replicas answered
//     fails as any Acquire whose context ended (ErrNotAcquired and
//     context.DeadlineExceeded; errors.Is ErrNotReplicated too), not as a
//     store failure: the replicas were given less time than asked for. Its
//     lock is given back too. Give Acquire a deadline above the ack
//     timeout plus 250ms. A renewal is shortened so by the lease's local
//     deadline.
//   - A lock handed over by a release (the handoff) was written by the
//     releasing client, whose release waits for no replica: with
//     WithReplicaAcks the waiter confirms it with an acquire attempt of its
//     own (acquire.lua finds the lock its own and re-arms it) followed by
//     WAIT, one round trip more per handoff.
//   - Refresh and the watchdog's renewals: a renewal fewer than n replicas
//     acknowledged fails with ErrNotReplicated and extends nothing. The
//     primary has re-armed the TTL, but a replica promoted now would expire
//     the lock at the old one, so the lease keeps counting from the last
//     acknowledged write: the watchdog retries it as any failed renewal,
//     and the lease ends with ErrLockLost at the old expiry if none is
//     acknowledged by then. A manual Refresh returns the error and the
//     lease stays held until then.
//   - Release does not wait: a release lost in a failover leaves the lock
//     on the promoted replica until its TTL (liveness, not safety), and a
//     WAIT would cost every Release up to the timeout while a replica is
//     down; one whose reply was lost too is resent or given back there
//     ("Failure modes"). No one is granted the lock twice by it: a grant
//     after the release on the primary (a handoff's included) is
//     acknowledged only once the replicas have everything before it in
//     the replication stream, the release too, and one not acknowledged
//     is given back.
//   - An attempt that follows a refused attempt of the same Acquire (a
//     retry, a waiter's next try) is sent without a WAIT. Decided: a
//     refused attempt writes only the fence counter and, queued, its queue
//     entry (in Fair mode only the entry), whose replication no grant
//     depends on (the next fence is at least the server clock, which
//     covers a counter lost in a failover: "Fences after a failover or a
//     lossy restart"), and its WAIT cost a replica round trip, the whole timeout while replicas are
//     down, and a pooled connection for that long, for nothing. Such an
//     attempt that acquires is not granted yet: an attempt with a WAIT
//     follows at once (acquire.lua finds the lock this token's and re-arms
//     it, a write the WAIT covers), one round trip more for a retry that
//     acquires, as for a handoff. The first attempt of every Acquire
//     waits as before, also when it is refused.
//   - A script cache flushed (SCRIPT FLUSH, a restarted or new primary)
//     makes the EVALSHA fail with NOSCRIPT after a WAIT was sent behind
//     it; the script then goes again as EVAL with its own WAIT, the one
//     that decides. Accepted, not fixed: the first WAIT cannot be left out
//     of a pipeline sent before the NOSCRIPT is known; it answers at once
//     while the replicas are caught up, and with fewer than n of them
//     waits its whole timeout for a write that did not happen, so it costs
//     at most one timeout more, for the attempts that meet NOSCRIPT (the
//     EVAL caches the script for the ones after them). (Quota, idempotency
//     and redisfence send a script they have not seen run with EVAL
//     instead: internal/replicaack; a lock's Acquire sends EVALSHA.)
//
// What it does not promise: WAIT does not make Redis strongly consistent.
// It says that n replicas had the write when WAIT answered, not that the
// replica promoted next is one of them: a failover that promotes a replica
// that did not acknowledge (one of several, with n below their number, or
// a replica that lagged) still loses the lock. Sentinel and Cluster prefer
// the replica with the largest replication offset, which makes that rare,
// not impossible; a replica restarted from an older snapshot loses it too.
// A write acknowledged by fewer than n replicas may still be on some of
// them (the give-back is not waited for either): a lock given back on the
// primary can outlive it on such a replica until its TTL, costing
// liveness after a failover, never exclusion. The timeout must leave 250ms
// of the client's ReadTimeout (New checks it): a pipeline's replies are
// read within ReadTimeout, and Redis answers a WAIT that timed out at its
// next timer tick (every 1000/hz ms: up to 100ms late at the default hz
// 10; a lower hz needs a larger margin than New checks). A timeout closer
// to ReadTimeout had the reply arrive after go-redis's read deadline: an
// i/o timeout, the connection dropped, the pipeline resent and each WAIT
// waited out again. Right after a replica (re)connects, the primary counts it only
// once it has acknowledged an offset (within a second), so acquires may
// fail meanwhile. Every acquire and renewal costs the replicas' round trip
// (go-redis hooks see a pipeline for each), and every one waits the whole
// timeout while too few replicas answer, also the first attempt of an
// Acquire that finds the lock held (not the retries after it). Fences and the "Failure modes" below still apply: use
// etcdlock where a lock must be a correctness guarantee.
//
// # Redis Cluster resharding
//
// Every key of one lock (the lock, its fence counter, the Fair queue and
// waiter deadlines, release tombstones) is in the lock key's hash slot, so
// a resharding (redis-cli --cluster reshard or rebalance: CLUSTER SETSLOT
// IMPORTING and MIGRATING, MIGRATE in batches, SETSLOT NODE) moves them
// together, one batch at a time. While the slot is open Redis runs a
// script only on a node that has every key it names: one whose keys are
// split between the two nodes, or that names a key not there yet (the
// lock of a free lock, the tombstone of a release), is refused with
// TRYAGAIN, or with the ASK or MOVED that go-redis stops following after
// ClusterOptions.MaxRedirects. MIGRATE moves a key with its TTL, at once;
// a script runs whole on one node or not at all. So no lock is granted
// twice and no fence repeats; what dips is availability, for as long as
// the slot is open (milliseconds for a slot of a few keys). In detail
// (TestReshard_Lock):
//   - A held lease keeps renewing: refresh.lua names only the lock key,
//     and go-redis follows the ASK to wherever it is.
//   - Acquire of the lock is refused until the slot has moved. A caller
//     that waits (WaitUntilDeadline, Retry) keeps waiting, within its
//     deadline (Retry: its attempts), trying again after 10 ms doubling to
//     320 ms (or its poll interval); a waiter queued before is handed the
//     lock after, its queue place kept. One that does not wait (FailFast,
//     Retry out of attempts) is refused as by a holder: ErrNotAcquired,
//     naming Redis's answer in its text only. It is no store failure, so
//     instrument's FailOpen takes no process-local lock beside the
//     holder's, which keeps renewing.
//   - Release is refused throughout (its tombstone key does not exist yet)
//     and tried again, with the same back-off, until the slot has moved,
//     its context ends or the next try would pass the lease's local
//     deadline. Only then does it return the error, never ErrNotHeld or
//     ErrLockLost, and the lock is given back in the background as after
//     any release of unknown outcome (see "Failure modes"): instrument.Do
//     returns that error, not ErrLockLost. A try that ran before the move
//     but whose reply was lost (go-redis's resend refused) is found by the
//     try after the move through its tombstone: Release returns nil
//     (TestReshard_ALostReleaseReplyThenAMoveReportsReleased). The
//     tombstone lives the release context's time left plus a second, a
//     minute at most; a try sent after that which finds the lock gone
//     cannot tell that release from a loss and returns an error of
//     unknown outcome, not ErrNotHeld (a move of over a minute, under a
//     context with no nearer deadline and a lease with over a minute left:
//     TestReshard_AMoveOutlastingALostReleasesTombstoneIsNoFalseLoss).
//   - In Fair mode an attempt that drops dead waiters from the head of the
//     queue can be aborted half-way ("Script attempted to access a non
//     local key": it deleted the queue, then read it again on the node
//     the slot is leaving); what it kept done is the clean-up only, and
//     the waiter tries again as above.
//   - Fences: the counter moves with its TTL, so fences go on increasing.
//     A counter that had expired (no holder for TTL + fence retention)
//     is seeded by the new node's clock: as after a failover (see "Fences
//     after a failover or a lossy restart"), a new node whose clock is
//     behind the old one's by more than TTL + fence retention could repeat
//     a fence.
//   - A migration left open (a reshard that died half-way; redis-cli
//     --cluster fix closes it) keeps the slot's locks refused: waiters
//     wait to their deadline, releases to the lease's deadline, and the
//     leases that were held expire at their TTL.
//   - The background give-back of a lock nobody holds any more (an
//     Acquire that gave up, a Release of unknown outcome) is tried again
//     on these answers too, within its usual window: leave.lua, admitted
//     on the node the slot is leaving, can be aborted the same way after
//     dropping the last dead waiter, before it deletes the lock. So is
//     the lock an attempt took before the move but whose reply was lost,
//     the resend refused (its caller gets ErrNotAcquired): given back once
//     the slot has moved, within the waiter timeout plus the lock's TTL
//     from the give-up, after which the lock has expired anyway
//     (TestReshard_ALostAcquireReplyThenAMoveGivesTheLockBack).
//   - Only a ClusterClient's MOVED or ASK counts: any other client
//     follows no redirect, and a MOVED it gets (a *redis.Client given one
//     Cluster node's address) comes back on every try. Acquire and
//     Release return it at once.
//   - Quorum mode (NewQuorum) does not retry so: its nodes are separate
//     servers, which do not reshard.
//
// # Failure modes
//
// redis-server down (in quorum mode, so many nodes that the others cannot
// make a majority): Acquire returns the connection error wrapped (not
// ErrNotAcquired) without waiting for the deadline; holders lose their
// leases by the local timer. Sentinel failover: a lock written to the old
// primary and not yet replicated is absent on the new one, and another
// client can take it (WithReplicaAcks narrows this window: see "Replica
// acknowledgements"); the old holder learns of it at its next renewal
// (ErrLockLost) — until then only the fence protects the resource (the new
// holder's fence is above the old one's, under the clock conditions of
// "Fences after a failover or a lossy restart"). This is why money-moving
// code checks the fence, or re-checks the invariant in the same atomic
// script that writes (see examples/quota), and reconciles against the
// database. Use etcdlock where a lock must be a correctness guarantee.
//
// A Release whose outcome is unknown (a transport error, or its context
// having ended, also while it waited for a renewal in flight: go-redis
// sends nothing on an ended context) returns that error and ends the
// lease's context with ErrLockLost, and the watchdog is stopped. The lock
// is then given back in the background, as an Acquire that gave up gives
// back what it may hold: leave.lua, owner-checked, hands it to the next
// queued waiter or deletes it, tried again until Redis answers or the
// lock's TTL has passed (in quorum mode, on each node whose release may
// not have run while those nodes could keep a majority from anyone else,
// also after a Release that one node confirmed and that returned nil: a
// minority of nodes that is down keeps its grant to its TTL). So `defer lease.Release(reqCtx)`
// after the request was cancelled frees the lock at once, not at its TTL;
// the TTL stays the net when Redis cannot be reached for that long, or the
// client is closed.
//
// After Locker.Close nothing runs in the background, so that give-back can
// no longer be left to it. Decided: it then runs in the caller, once,
// bounded by the caller's context (and a second), before Release returns,
// and not at all when that context has already ended: Release returns at
// once, its error wrapping the release's error and ErrClosed and saying
// that the lock is left to its TTL (so too when the one try fails). A
// caller's context bounds what the caller waits for; a give-back detached
// from it made `defer lease.Release(reqCtx)` after Close wait up to a
// second for a request already cancelled. In quorum mode a Release that one
// node confirmed still returns nil; the grants the give-back could not
// reach expire at their TTL. An Acquire that gives up after Close leaves
// its queue entry or lost grant the same way (within its context, which has
// usually ended: left to the entry's deadline and the TTL). Close a Locker
// after its leases are released, not before, to keep the background
// give-back.
//
// An attempt whose reply is lost after it ran may have taken the lock under
// a token that only this Acquire knows. go-redis resends it while the
// caller's context lives (acquire.lua recognises its own token: the lock is
// then acquired, not taken twice); when the context ends first, or the
// resend fails too, Acquire returns an error (ErrNotAcquired with the
// context's error once the context ended, else the last try's error) and
// gives the lock back in the background with leave.lua, as a waiter that
// gave up leaves the queue: without that, the lock would stay taken, by
// nobody, for its whole TTL. The give-back is owner-checked: after a
// Sentinel failover it frees the lock on the promoted replica if the replica
// had it, and leaves alone the lock of whoever took it there if not
// (TestGiveBackSentinel_ALostAcquireGivenBackAcrossAFailover). Every failed
// attempt counts but one through a closed client: go-redis returns only the
// last try's error, and a dial that failed, a pool timeout or an error reply
// (OOM, READONLY) to a resend says nothing of the first try, whose reply may
// have been lost after it took the lock. In quorum mode the same holds per
// node: an owner-checked release goes to each node whose reply to an attempt
// was lost, and to each node that a minority grant's give-back (run before
// Acquire returns) did not reach, until the node answers. Background leaves
// are bounded per Locker (4 tries in flight, 4096 waiting; past that, what a
// leave would take back expires by itself), so that an outage in which every
// attempt fails does not take the client's pool from the application. A
// leave cannot stop an attempt that reaches the server after it (held up in
// the network past the caller's deadline, on a connection go-redis gave up):
// the lock that attempt takes expires at its TTL.
//
// A release whose reply is lost (read timeout) is resent by go-redis on a
// new connection; the resend finds the key gone or already the next
// holder's, and the tombstone its first try left: Release reports success,
// not ErrNotHeld, and instrument.Do does not report a finished critical
// section as ErrLockLost. A lock that vanished by expiry or someone else's
// delete leaves no tombstone, so Release reports ErrNotHeld for it. In
// quorum mode Release is ErrNotHeld when a majority of nodes deny the token,
// even if a node whose grant ran late still had it (that leftover, and only
// that, is deleted). Across a failover or a restart the tombstone helps
// only where the release's write survived
// (TestReleaseFailover_ALostReleaseRetriedOnAPromotedReplica,
// TestReleaseRestart_ALostReleaseReplyThenARestartWithoutPersistence):
//
//   - A failover to a replica the release had not reached: the resend,
//     following the failover, finds the lock still this token's there and
//     releases it again (handing it to the first waiter queued there), and
//     Release returns nil. A Sentinel failover takes seconds, longer than
//     go-redis resends: Release then returns the resend's error (outcome
//     unknown, not ErrNotHeld) and the give-back does the same on the
//     promoted replica once it is reached
//     (TestReleaseSentinel_AReleaseLostWithItsPrimaryIsGivenBackOnThePromotedReplica).
//     A handoff the first try made on the old primary is lost with it:
//     the waiter it woke holds a lease the new primary does not have
//     (unless the resend or the give-back handed it the lock again there,
//     its queue entry having reached the replica). Without WithReplicaAcks
//     another caller can take the lock there meanwhile, and that waiter
//     learns it at its next renewal (ErrNotHeld from Refresh, its lease
//     ended with ErrLockLost), within TTL/3; until then only the fence
//     protects the resource, as in the Sentinel failover above. With
//     WithReplicaAcks the waiter is never granted that lock: its
//     confirming attempt is not acknowledged while the release before it
//     has not reached the replica (ErrNotReplicated, the lock given back).
//   - A restart without persistence between the first try and the resend
//     takes the tombstone with the lock: the resend finds neither, and
//     Release returns ErrNotHeld (instrument.Do: ErrLockLost) although the
//     first try released the lock. Nothing on the restarted server tells
//     that from a lock the restart took before the release ran, which the
//     same error reports: the report errs towards a loss, never towards a
//     release that did not happen. Only persistence that keeps the
//     release's write (appendonly yes, appendfsync always) avoids it;
//     WithReplicaAcks does not (a release waits for no replica).
//
// Pub/sub connection lost (server restart, CLIENT KILL, a network error):
// go-redis reconnects and resubscribes, and releases published meanwhile are
// lost. Every waiter tries again at once and again when the resubscription
// is confirmed, so none waits for a release that already happened; until
// then waiters poll. A half-open pub/sub connection (the peer gone without
// a reset) is found by its health check and replaced within about 4s (see
// "Waiting: the handoff"); meanwhile waiters fall back to the poll
// interval. A half-open pooled connection costs the call that takes it the
// client's read timeout (or its context's deadline, if sooner), and
// go-redis's retry may take another: a Release can then fail with its
// outcome unknown (above).
//
// The client should set ContextTimeoutEnabled so that calls honour context
// deadlines; otherwise a blackholed server can hold a call for ReadTimeout.
//
// Eviction: a Redis with maxmemory set and a maxmemory-policy other than
// noeviction deletes keys when memory is full. Every key a lock creates has
// a TTL, so each is a candidate under the volatile-* policies (volatile-lru
// is AWS ElastiCache's default) as much as under allkeys-* (a shared cache
// Redis). An evicted lock is the failover case above without a failover:
// another Acquire takes it at once while the holder still believes it
// holds it; the holder's next renewal (within TTL/3) ends its lease with
// ErrLockLost and its Release returns ErrNotHeld; the new holder's fence is
// above the old one's even when the fence counter was evicted too (it is
// seeded from the server's clock). Mutual exclusion is lost for up to a
// renewal interval, and only the fence protects the resource then
// (TestEviction_HolderLearnsAtItsNextRenewalAndTheNextFenceIsHigher, under
// volatile-lru, volatile-ttl, allkeys-lru and allkeys-random). No client
// can prevent it: run the lock Redis with maxmemory-policy noeviction (a
// full Redis then refuses new Acquires with an OOM error, a store failure,
// instead of deleting held locks; renewals, PEXPIRE, still run). The agent
// reports a store with eviction on (detector "store", kind
// eviction_enabled, critical while evicted_keys rises; alert
// LockgovStoreEvictingKeys).
package redislock
