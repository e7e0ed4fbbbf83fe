// Package detectors finds what a governed process cannot see from inside:
// leaked locks, clock-skew tiers, WorkerID collisions, distributed
// deadlocks and a lock store that evicts keys, across the fleet, by reading
// the stores the fleet uses. The
// lockgov agent runs them on an interval and serves their findings.
//
//	rs, _ := detectors.NewRedisStore(rdb)              // single node, Sentinel or Cluster
//	locks, _ := detectors.NewLocks(rs, detectors.WithPolicy(pol))
//	findings, err := locks.Detect(ctx)                // []Finding, deterministic order
//
// Detectors read stores only through the backends' exported key layout and
// value decoders (redislock.DecodeValue, IsCompanionKey; etcdlock.ParseQueueKey,
// DecodeValue; workerid.SlotKey, DecodeClaim; fleet.Decode), never by
// parsing strings of their own. A Finding never carries an owner token.
//
// # Detectors
//
//   - Locks ("locks"): SCAN with the policy's patterns (DefaultLockPattern
//     plus each pattern's glob, or WithPatterns) in COUNT batches, one
//     pipeline of PTTL + GET per batch, on every Cluster primary; never KEYS.
//     On etcd a paged range over the lock prefix at one revision; the entry
//     with the lowest create revision holds a lock. Kinds: immortal (no
//     TTL: always a finding, whoever holds it, a foreign value included),
//     ttl_above_max (above the pattern's max_ttl), held_too_long (acquired
//     longer ago than the pattern's max_hold), holder_dead (the holder's
//     process published heartbeats and they are gone). A lock with a TTL
//     within the policy, held within max_hold by a live process or by one
//     that never published heartbeats, is never a finding.
//   - Clock ("clock"): skew_degrade and skew_reject per instance and store,
//     from the offset each heartbeat reports, ranked by the policy's skew
//     tiers (the worse of that and the tier the process applies). A
//     publisher that cannot measure keeps its last offset: one measured
//     more than three of the process's intervals before its beat says
//     nothing of the clock now and is not ranked, only the tier the
//     process applies counts, and the finding says how old the offset is.
//   - Deadlock ("deadlock"): the fleet-wide wait-for graph from the
//     heartbeats' Held and Waiting lists; each cycle (strongly connected
//     component) is one deadlock finding naming its instances and keys;
//     lock orders seen both ways over time are lock_order_inversion. A
//     lock is named by the store its heartbeat was read from and its key,
//     so the same key in two deployments is two locks that never meet.
//     A process-local fallback lock (an entry with "fallback": true,
//     instrument.FailOpen during a store outage) is its process's alone:
//     it meets neither the store's lock on the key nor another process's
//     fallback lock on it, so processes that fell back never deadlock each
//     other through them; their lock orders still count (as the store's).
//   - WorkerIDs ("workerid"): workerid_duplicate, workerid_lease_gone,
//     workerid_out_of_range, workerid_range_overlap. The policy file has no
//     WorkerID ranges: they are given with WithServiceRange.
//   - Store configuration ("store", StoreConfig): eviction_enabled, a Redis
//     with maxmemory > 0 and a maxmemory-policy other than noeviction on
//     any node (one finding per store; warning, critical when INFO stats'
//     evicted_keys rose since the previous Detect), and eviction_unknown
//     (info), a node that refused INFO or did not report its policy. Read
//     with INFO memory, stats and server, never CONFIG GET (see StoreConfig
//     for why). Every lockgov key with a TTL is an eviction candidate; what
//     each primitive does when its keys are evicted is in its package's
//     Failure modes.
//
// Every Finding has a severity and an Action: the redis-cli or etcdctl
// command an operator runs (passwords are never in it: redis-cli gets
// --askpass), and what to do around it. An Action is one line of printable
// ASCII that bash reads as at most one command followed by a comment: a
// read or a TTL ("etcdctl get …", "redis-cli PEXPIRE …"), or no command at
// all when the line begins with "# ". Pasted whole it runs that command
// and nothing else. A command that frees a lock (DEL, del, lease revoke)
// ends the comment, after ": ", to be copied on its own. Actions quote
// for a shell (internal/shellquote) every name that a store, a heartbeat
// or the configuration supplies: keys, services, instances, hosts, trace
// ids; so that a name copied from the comment pastes as one argument, and
// none can end the comment (a newline is \x0a in $'…'). Go code in an
// action (workerid.WithServiceRange("…", …)) quotes as Go does, in ASCII. A
// finding on a lock without a TTL also has the lock's
// Version ("version" in JSON): the SHA-1 of the value in hex on Redis, the
// holder entry's mod revision on etcd, never the value or its owner token.
// The agent's remediation deletes the lock only at that version when a
// client sends it back as If-Match. Only such locks pay for the digest: a
// healthy lock costs the scan nothing more.
//
// # Keys that are not UTF-8
//
// A key is bytes to Redis and etcd, and another application's key under a
// scanned pattern need not be UTF-8. In JSON (Finding.MarshalJSON) such a
// key is "key" with U+FFFD in place of each byte that is not UTF-8, as
// encoding/json writes it (and that may spell another key that exists),
// and "key_base64", the standard base64 (RFC 4648, padded) of its bytes,
// which UnmarshalJSON reads back exact. A UTF-8 key is "key" alone. A
// client that acts on a key uses key_base64 when it is there. Actions quote
// keys for a POSIX shell, with $'\xNN' escapes for bytes outside printable
// ASCII, so the command is UTF-8 text and the shell passes the key's bytes:
// redis-cli does not unescape its arguments (only its interactive prompt
// reads "\xff"). The key pattern of such a key is a declared pattern that
// matches it, else "other" (policy.Matcher), never the key.
//
// # Memory
//
// A scan holds one batch of keys (WithScanCount, default 1000) per Cluster
// primary at a time, never the key set, so memory does not grow with the
// number of locks; findings are capped per kind (WithMaxFindings, default
// 1000, the rest counted in one summary finding). What a detector
// remembers across calls is bounded by the fleet, not by the keys: the
// identities of processes seen publishing heartbeats (WithMemory, default
// 24h), lock orders (at most MaxOrders), WorkerID slots seen gone.
//
// # Failure modes
//
//   - A store that cannot be read (down, timeout, ACL): the detectors read
//     the heartbeats of their stores side by side, the first under the
//     whole context, the others under half of the time it has left, so that
//     a store that does not answer leaves the rest of the work time. A
//     store whose heartbeats cannot be read makes Detect return the
//     findings it could make from the others together with a
//     *PartialError that names the unread stores and the Scopes of what it
//     could not check, so that a caller keeps its earlier findings there
//     and takes the new ones elsewhere (the agent does; it counts no
//     partial run as completed). A finding seen is real (a collision, a
//     skew tier of a beat read, an immortal lock); none that needs the
//     absence of data is made from a partial read: Locks reports no
//     holder_dead for a holder that may publish into an unread store (one
//     seen there, or one never seen while that store was read whole; its
//     Holder.Heartbeat is "unknown"), WorkerIDs rules out no duplicate
//     and forgets no slot seen gone, Deadlock reports no cycle through an
//     instance without per-goroutine holds. A lock's value does not say
//     where its holder publishes: a process whose Locker on B publishes
//     no heartbeat (quorum, adapters, WithoutHeartbeat, a closed Govern)
//     may publish only into A, through another Locker or a WorkerID lease;
//     a store counts as one the holder does not publish into only if the
//     last read that saw the holder read it whole, within an unbroken run
//     of reads (Locks.NewTerm, which the agent calls at each term, and a
//     read that fails whole forget it). The one guess left is a holder
//     that moves its heartbeat into a store between the last read that
//     saw it (that store read whole) and the next, in which that store is
//     unread: one scan interval. The
//     store a Locks detector reads locks from, and the first of the
//     others, read nothing at all: their failure is Detect's error.
//   - Redis Cluster resharding: the Redis scans SCAN each primary and
//     read what they find there; a key in a slot being moved answers
//     MOVED or ASK on the node it was listed on, and is read again by key
//     through the Cluster client, which follows the move (before, Detect
//     failed for as long as such a slot stayed open). A heartbeat moved
//     from a primary not yet scanned to one already scanned is on
//     neither when each is read: before a process seen earlier is called
//     gone, its heartbeat is read by key (a GET and a PTTL per such
//     instance and Detect, on a Cluster only), so its live locks are not
//     holder_dead. A lock key can be listed on both nodes (reported once)
//     or on neither (missed for one scan); remediation deletes only a lock
//     without a TTL, checked again in its script, so a live lock, which
//     has one, is never deleted.
//   - holder_dead needs memory: after an agent restart a lock whose holder
//     died earlier is reported only by its TTL (or immortal). A process
//     cut off from the store long enough for its heartbeat to expire (three
//     intervals) while its lock's TTL has not yet run out is reported as
//     holder_dead: it can no longer renew anyway.
//   - A heartbeat key that is there under a TTL (a lease on etcd), as a
//     publisher writes it, but does not decode (over fleet.MaxBeatBytes,
//     written by a publisher that did not cut its beats, or damaged)
//     proves its process alive, though not what it holds: locks of the
//     host and pid its value names are not holder_dead (they are reported
//     by TTL and max_hold only, like a holder never seen). Only when the
//     value names no host and pid (not JSON) is the process the one its
//     instance was last seen as, and any lock naming the instance: a new
//     process that took a dead one's instance name hides the dead one's
//     locks then. A key without a TTL (a lease) proves nothing, whether
//     or not it decodes: no publisher writes one, and a dead process's
//     last beat that lost its TTL would otherwise keep its locks from
//     holder_dead for ever. No detector reads such a key as a heartbeat.
//     Heartbeats are read on Redis with one pipeline of GET + PTTL per
//     SCAN batch; a TTL that cannot be read fails Detect like a value
//     that cannot be read. A
//     truncated heartbeat (fleet.Heartbeat.Truncated: the process holds
//     more locks than one beat lists) proves its process alive just as
//     well: holder_dead is about the process, never about whether a beat
//     lists the lock; the deadlock detector may miss a cycle through the
//     locks it leaves out.
//   - A holder is matched to its heartbeat by host and pid, or by instance
//     and pid. A restarted container with the same host name and pid (pid 1)
//     looks like the same process: its predecessor's locks are then found
//     only by TTL.
//   - SCAN may return a key twice (during a rehash): it is still one
//     finding, as Locks keeps one finding per kind, store and key (the
//     summary count of findings past WithMaxFindings may count it twice).
//     SCAN misses keys created after its cursor passed; the next Detect
//     sees them.
//   - etcd lease TTLs cost one TimeToLive call per lock; they are read only
//     for locks that may be findings (foreign values, a recorded TTL above
//     max_ttl, held too long, holder gone). etcd grants whole seconds: a TTL
//     is above max_ttl only past max_ttl rounded up to a second.
//   - Heartbeats from different instances are written at different times:
//     a cycle is reported only when every wait and hold in it began before
//     the oldest beat in it was sent (so they coexisted at that instant),
//     by the instances' own clocks; a real deadlock is therefore reported
//     at most one publish period after it forms, and on every call until it
//     is broken. A process that does not publish HoldsWhileWaiting is one
//     node: a cycle through it may be a wait behind a lock its other
//     goroutine will release.
//   - A heartbeat written before the fallback marker existed (or by a
//     process that did not fall back) lists every entry as the store's
//     lock: an older process's fallback locks during an outage can still
//     read as a cycle across processes. Upgrade the processes that use
//     FailOpen.
//   - workerid_lease_gone is reported when two beats in a row of an
//     instance show the slot gone or held by another process, so that a
//     process that released its WorkerID on shutdown, whose last beat
//     lingers, is not reported. A registry that overrides its host name
//     (workerid.WithIdentity) is matched by instance name too. For the
//     same reason workerid_duplicate leaves out an instance whose slot
//     names another process that claimed it after the instance's beat was
//     sent (a handover: the releasing process's last beat still lists the
//     id); two instances both beating after the claim are a duplicate. The
//     two claim and beat times come from two processes' clocks.
//   - etcdlock's entry names contain a NUL, which no shell can pass to
//     etcdctl: Actions free such an entry with `etcdctl lease revoke` of the
//     lease its name ends with (a name anyone who can list the prefix sees)
//     when the entry is the only key that lease holds, as etcdlock's are (a
//     lease per Acquire); a lease that holds other keys (another writer's
//     session) gets no command, since revoking it would delete them too,
//     and the Action says to delete the entry through a client library.
//     Actions list such an entry with the rest of its queue: `get KEY KEY$'\x01'`, the
//     range of the "KEY\x00…" entries (`get --prefix KEY` would list the
//     queue of every lock whose key begins with KEY). A Redis key with a
//     NUL (another application's) gets no redis-cli command: $'…\x00…'
//     would reach redis-cli cut at the NUL, naming another key, whose lock
//     PEXPIRE or DEL would change; its Action says to use a client library
//     or the agent's DELETE with key_base64. A WorkerID slot key with a NUL
//     (a heartbeat names it) gets no get either.
//   - Another writer's etcd key under a lock's queue prefix
//     ("<key>\x00other", not etcdlock's layout) is reported as a lock of
//     its own, by its etcd key, and its findings say that etcdlock counts
//     it as a holder of <key> (instrument/etcdlock, "Failure modes"): an
//     Acquire of <key> queued after it waits until it is deleted.
//   - StoreConfig remembers each node's evicted_keys count: the first
//     Detect after the agent starts cannot see a rise, so a Redis evicting
//     right then is a warning for one interval, as is a primary not read
//     before (added, or a replica promoted). A node restarted (or replaced
//     at its address: INFO server's run_id changed) counts its whole count,
//     as does one whose count went down (CONFIG RESETSTAT): what it evicted
//     since is new. A CONFIG RESETSTAT followed by as many evictions as
//     before it reads as a rise: the keys up to the old count are lost to
//     the count (nothing tells that reset). Reset forgets the counts: the
//     agent calls it when it leads again after another agent led, which
//     counted the evictions meanwhile (what Redis evicted between that
//     leader's last scan and the next one's first is then not counted; a
//     term shorter than the followers' poll may go unseen and be counted
//     twice). Evictions of keys that are not lockgov's count too: on a
//     shared Redis the critical finding may be about other keys, and the
//     agent cannot tell which keys Redis evicted.
//   - Values no decoder knows (another library's, garbage, a non-string
//     Redis key under a lock pattern) are reported as foreign, holder
//     unknown, never an error.
package detectors
