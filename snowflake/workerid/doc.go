// Package workerid leases snowflake WorkerIDs from Redis or etcd, so that two live
// processes never issue the same ID under one WorkerID, and no process reuses time that an
// earlier holder of its WorkerID already used (under the conditions in Guarantees).
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
// to an etcd lease (and the transaction's Succeeded flag checked). Either also refuses a
// slot that records another ID space than the Registry's (see ID space). Renewal every TTL/3 is
// owner-checked as well: a script that PEXPIREs only the owner's key, never a bare EXPIRE;
// on etcd a KeepAliveOnce plus writes conditioned on the key's create revision.
//
// # Heartbeat and clock skew
//
// Each Lease lists its WorkerID in the process's fleet heartbeat on the registry's store
// (package instrument/fleet: one heartbeat per process and store, shared with governed
// Lockers there), so the agent sees two instances claiming one WorkerID. Lease.ClockSkew
// reports the heartbeat's measured offset and whether it is in the reject tier; a
// generator bound with snowflake.WithLease then refuses IDs with *snowflake.ClockSkewError.
// WithoutHeartbeat turns both off; WithHeartbeat configures the heartbeat. On etcd the
// offset comes from the agent's tier report (etcd has no clock): without an agent, no tier.
// ClockSkew is the last measurement however old: a heartbeat that cannot measure keeps it
// (its MeasuredAt in the heartbeat says how old), so a generator in the reject tier goes on
// refusing until a new measurement clears it; forgetting it would apply no tier, which is
// no safer than an old one.
//
// # Expiry and the generator
//
// A Lease implements snowflake.WorkerLease. Its ValidUntil is the send time of the last
// confirmed renewal plus TTL minus a margin (default TTL/10), on the local monotonic clock:
// the store cannot have expired the key before then, so a bound generator refuses
// (ErrWorkerLeaseLost) before anyone else can claim the slot, whether or not renewals get
// through. A renewal that finds the slot held by another owner ends the lease with
// ErrTakenOver, and the generator refuses from then on. While the store is unreachable the
// lease keeps retrying; if the slot has vanished when the store comes back, the same owner
// claims it again, as a new claim with the floor that claim finds (see Failure modes).
//
// # High-water mark
//
// Each slot has a high-water key: the latest Unix millisecond any holder may have used. A
// claim reads it as the floor (the generator never issues at or below it) and raises it to
// a reservation of max(floor, now)+TTL; every renewal raises it to now+TTL, never lowers
// it (on Redis inside the script, on etcd a write conditioned on the mark's mod revision),
// and the bound generator refuses to issue past the reservation, so the mark covers every
// ID issued even if the holder crashes or its wall clock jumps forward. Release lowers it
// to the time actually used (never below the floor it found), so a graceful restart starts
// at once. A lease garbage-collected while held keeps its reservation as the mark.
//
// On Redis a missing mark means unknown, not zero: Redis loses it together with the slot
// (a restart without persistence, FLUSHALL, eviction), while the previous holder may still
// issue IDs on a lease that is valid on its side for up to one TTL. A claim that finds no
// mark therefore takes the server's now+TTL as its floor (the longer of its TTL and
// WithMaxPeerTTL): every earlier lease has ended by then. Redis cannot tell such a slot
// from one never used, so the first claim of a slot, or of one idle for longer than
// WithHighWaterTTL (default 24h), waits one TTL too. etcd keeps the mark without a lease
// and does not lose acknowledged writes: there a missing mark means never used, and the
// floor is 0.
//
// Claim returns once a bound generator can issue: while the floor is at most two TTLs ahead
// of the local clock (a crashed holder's reservation, an unknown mark) it waits, renewing
// meanwhile, and it fails at once if ctx's deadline comes before the floor. A floor further
// ahead means this host's clock is behind an earlier holder's: Claim returns, and the
// generator refuses with *snowflake.ClockBackwardsError until the clock catches up.
//
// The claim is idempotent for its own token: the slot value records the floor the claim
// found, and a second run of the same claim (go-redis retries EVALSHA after a read timeout,
// the first reply lost) answers that floor instead of reading back its own reservation.
//
// # Replica acknowledgements
//
// On Redis, a claim or renewal the primary acknowledged and a replica did not yet have is
// lost when that replica is promoted: a new claimant there gets the WorkerID with the mark
// of before, while the holder's generator issues on under the lost renewal. Built
// WithReplicaAcks(n, timeout), a Registry sends WAIT n timeout after each claim and renewal
// script, in one pipeline on the script's connection, and a lease counts only what n
// replicas acknowledged: an unacknowledged Claim releases the slot (owner-checked, the mark
// put back) and returns *NotReplicatedError (errors.Is: ErrNotReplicated; a WAIT whose
// reply was lost matches ErrNotReplicated with its transport error, counts unknown); an
// unacknowledged renewal, or re-claim of a vanished slot, is a failed renewal, retried,
// and ValidUntil and the reservation stay those of the last acknowledged one. So each of
// those replicas, promoted, holds the slot until the generator has stopped and a mark at
// or above every ID it issued. The price: a WAIT per claim and per renewal; while fewer
// than n replicas answer within timeout no lease renews and generators stop at ValidUntil
// (no duplicate IDs rather than availability). A Release does not wait (lost, it leaves the
// slot to expire and the mark at the reservation). The default sends no WAIT. Single node
// and Sentinel (NewFailoverClient) clients only: a ClusterClient or Ring sends WAIT to a
// node of its choosing. NewEtcd refuses the option: etcd acknowledges a write once a quorum
// has it, and a new leader has every acknowledged write.
//
// # ID space
//
// The mark is a Unix millisecond, but an ID's time counts from its generator's epoch and
// its bits are split by its layout: above one mark, generators of another epoch or layout
// issue the IDs the slot's earlier holders issued. So a Registry has an ID space, its
// layout and epoch (WithLayout, WithEpoch; snowflake.DefaultLayout and DefaultEpoch
// without them), and a slot records the space its mark's IDs are in, as
// "<layout>@<epoch in Unix ms>" (41/10/12@1704067200000 by default), in a third key beside
// the mark, SlotKey + ":space", which shares the slot's hash tag (one script reaches all
// three on a Redis Cluster). Decisions:
//   - A claim that finds another space recorded is refused with *SpaceMismatchError
//     (errors.Is ErrSpaceMismatch), which names the slot and both spaces, whether the slot
//     is held or free; it takes and writes nothing. On Redis the check is in claim.lua, on
//     etcd a condition of the slot's claim transaction.
//   - A claim that finds no space recorded is accepted, and records its own. Such are
//     the slots of a rolling upgrade (Registries older than the space key write none), a
//     slot never used, and on Redis one whose mark expired or was lost. A Registry without
//     WithLayout and WithEpoch records and checks the default space: a fleet mixing it with
//     Registries of another space is caught like any other.
//   - A lease binds only generators of its Registry's space, options or not: snowflake.New
//     refuses another layout or epoch with snowflake.ErrInvalid. A recorded space is then
//     that of the IDs really issued under the slot. Generators of another space than the
//     default need their Registry built WithLayout/WithEpoch with the same values.
//   - WithNextFree (and a host without an ordinal, which takes the first free slot) passes
//     by a slot of another epoch of the same layout, like a held one: on different
//     WorkerIDs the two epochs' IDs never meet, since the worker bits differ. A slot of
//     another layout fails the Claim: IDs of two layouts meet across WorkerIDs, and no slot
//     of the range is safe. A range with no slot left is ErrNoFreeSlot, wrapping the first
//     mismatch too.
//   - A live lease whose slot vanished and whose re-claim finds another space ends with
//     ErrTakenOver (wrapping ErrSpaceMismatch): a Registry of that space used the WorkerID
//     meanwhile.
//   - The space key lives as long as the mark: Release never deletes it (the mark, and
//     the IDs under it, outlive the lease); on Redis every write of the mark (claim,
//     renewal, release) writes the space too under the same WithHighWaterTTL; on etcd it
//     has no lease, as the mark.
//
// The check covers Registries of this version on one store and key prefix. Not covered:
// Registries older than the space key neither check nor write it; on Redis the space is
// lost with the mark (a restart without persistence, eviction, FLUSHALL) or expires with
// it after WithHighWaterTTL idle, and the next claim records its own: a Registry of a
// later epoch (or another layout) claiming then repeats IDs of the lost space (measured:
// 130,000-350,000 of them after a restart without persistence), since the floor a lost
// mark gets is a Unix millisecond and cannot say which epoch it counted in. A record that names
// the wrong space (a Registry built without the options for generators of another space:
// New refused them, but the claim had recorded the default) refuses the right Registry
// until the key is deleted by hand (on Redis, or it expires); delete SlotKey + ":space"
// only if no generator of the recorded space ever issued under the WorkerID.
//
// # Guarantees
//
// No two generators bound to leases on one WorkerID issue the same ID, and none issues at
// or below a millisecond an earlier holder may have used, provided that:
//   - every holder's wall clock is within the margin (WithMargin) of the store's clock, and
//     every host's monotonic clock runs at the store's rate to within the margin (the
//     clock-skew tiers refuse new IDs beyond 500 ms of offset);
//   - the store keeps what it acknowledged, or loses a slot's keys entirely (see Failure
//     modes for a mark that survives stale);
//   - every Registry on one store and key prefix uses the same TTL, or one with a shorter
//     TTL is built WithMaxPeerTTL(the longest): on Redis a claim that finds the mark lost
//     waits out its own TTL, which covers no holder with a longer one (see Failure modes);
//   - every generator for the WorkerID is bound to a lease from a Registry on the same
//     store and key prefix, one generator per lease (snowflake.New refuses a second
//     generator on a lease already bound, with snowflake.ErrInvalid);
//   - every generator on the store and key prefix uses the same epoch and layout: the mark
//     is a Unix millisecond, an ID's time is milliseconds since its generator's epoch.
//     Checked for Registries of this version while the slot's space is recorded (see ID
//     space and Failure modes).
//
// # Failure modes
//
//   - Store unreachable: renewals fail, the generator refuses from ValidUntil on. When the
//     store answers again the lease renews (or re-claims a vanished slot) and the generator
//     resumes.
//   - Redis Cluster resharding of a slot's hash slot (slot key, mark and ID-space key share
//     a hash tag): while the three are split between two nodes Redis refuses renew.lua and
//     claim.lua (TRYAGAIN). As with a store out of reach: renewals fail, a second claim of
//     the WorkerID fails, the generator refuses from ValidUntil on if the slot stays open
//     that long, and the lease renews once the slot has moved
//     (TestRedis_LeaseRenewsAcrossASlotMigration).
//   - Holder crash: its slot expires after the TTL. The next holder's floor is the crashed
//     holder's reservation, at most one TTL after its last renewal: Claim waits until the
//     local clock passes it (usually it already has, as the slot took a TTL to expire).
//   - Redis restart without persistence (also FLUSHALL, eviction of these keys under a
//     maxmemory-policy other than noeviction: every slot key has a TTL): slot and
//     mark are gone. A new holder's floor is the server's now+TTL, so it issues only after
//     every lease granted before the loss has ended; the old holder stops at its next
//     renewal, which finds the slot taken (ErrTakenOver), and in any case before its lease
//     could have expired. A holder whose renewal finds its slot gone re-claims it with the
//     same rule, so after such a loss every generator pauses for one TTL. Nothing of the
//     old holder survives such a loss, its TTL included, so the claimant's TTL must be the
//     longest on the prefix, or WithMaxPeerTTL must say what is: otherwise the new holder
//     can start while a holder with a longer TTL still issues, and both issue the same IDs.
//     To change the TTL in a rolling deploy, run every Registry, old and new, with
//     WithMaxPeerTTL of the longer of the two TTLs (when lengthening it, deploy that
//     option first, with the old TTL), and drop the option once every lease of the old
//     TTL has ended. On etcd the mark is not lost, and the TTLs may differ.
//     Eviction may also take the slot and keep its mark (volatile-ttl takes the slot's
//     shorter TTL first): the new holder's floor is then the old holder's reservation,
//     which covers every ID the old holder may still issue. Both cases are tested
//     (TestEviction_TwoHoldersNeverIssueTheSameID); the agent reports a Redis with
//     eviction on (detector "store", kind eviction_enabled): no duplicate IDs, but every
//     generator on an evicted slot pauses for up to one TTL.
//   - Lost replies: a claim retried after a lost reply answers the floor of its first run.
//     A Claim that fails after its claim may have taken the slot (the reply lost or late,
//     its context ended, on etcd the high-water raise failed after the slot was created)
//     releases the slot by that claim's own token, owner-checked, on a fresh context of
//     at most a second, so that a retry does not collide with its own process. On Redis
//     release.lua puts the mark back to the floor the claim found (the slot's value
//     records it; nothing was issued under the claim), so that failed claims retried one
//     after another do not push the mark a TTL further each; on etcd the claim's grant is
//     revoked and the mark stays as the claim may have raised it (the retry waits for it,
//     at most one TTL). The same holds for a Claim that took the slot but failed waiting
//     for the floor. If that release fails too, the Registry's next Claim sends it again
//     before claiming (for the last 16 failed claims). A live lease's re-claim of its
//     vanished slot that fails is not released on Redis: if it took the slot, the slot is
//     under the lease's own token, and the next renewal finds it there and takes the
//     floor the re-claim recorded (a release could arrive late, after that renewal, and
//     lower the mark under IDs issued). A Release never sets the mark below the floor the
//     slot's claim recorded. Still held for up to a TTL: a slot whose claim request
//     reaches the store after its release (delayed in flight), and a slot claimed by one
//     Registry and retried through another. A lost renewal reply is a failed renewal
//     (retried; the generator stops at ValidUntil if none gets through); a Release whose
//     request or reply is lost returns the error, and the slot is then deleted or expires
//     after the TTL.
//   - A mark that survives but is stale, on Redis a restart from an older RDB snapshot or
//     an append-only file with appendfsync everysec, or a failover to a replica that
//     lagged, on etcd a restore from an older snapshot: not detected. A new holder's floor
//     can then be below IDs a holder still running on its old lease issues until its next
//     renewal (at most TTL/3 later, or until that lease could have expired); measured on a
//     failover with a 3s TTL, about 70,000 IDs issued twice. WithReplicaAcks closes the
//     failover to a replica that acknowledged (see Replica acknowledgements): the holder's
//     generator never issues past a deadline or a mark that replica lacks. Not closed by it:
//     a failover to a replica that did not acknowledge (n below the number of replicas
//     Sentinel may promote); a restart from an older snapshot, or with appendfsync everysec,
//     of the primary or of an acknowledging replica (WAIT counts what a replica holds in
//     memory, not on disk; Redis 7.0 has no WAITAOF); a restart without persistence, which
//     loses the slot with its mark and is the case above, not this one; etcd restores. Run
//     Redis with appendfsync always and WithReplicaAcks(every replica Sentinel may promote),
//     or use etcd, where WorkerIDs must not repeat across such events.
//   - Host clock behind an earlier holder's by more than two TTLs: Claim returns and the
//     generator refuses with *snowflake.ClockBackwardsError until the clock catches up.
//   - A second generator bound to one lease: snowflake.New refuses it (ErrInvalid), since
//     it would issue the first one's IDs. Share the first generator, or claim another
//     lease. (Lease.TrackLastUsed, called directly, does not check; New does not use it.)
//   - Generators with different epochs or layouts on one WorkerID: each would issue above
//     the mark, but their IDs cover different spans of time, so a generator whose epoch is
//     later reissues the IDs of one whose epoch is earlier (a layout change likewise). The
//     slot records its ID space: a claim of another space is refused (ErrSpaceMismatch),
//     and snowflake.New refuses a generator whose layout or epoch is not its lease's
//     Registry's. Not detected where no space is recorded (see ID space): slots of
//     Registries older than the space key, and on Redis a space lost or expired with the
//     mark. Do not change the epoch or layout of IDs in use: IDs issued under the old one
//     can come again under the new one, whatever the key prefix; on the same prefix the
//     recorded space refuses the change.
//   - Lease dropped without Release: when garbage-collected it is counted
//     (WithLeakedHook), logged (WithLogger) and released; until the collector runs, it
//     renews and holds its slot like a live lease.
//
// Redis keeps the high-water key and the space key for WithHighWaterTTL (default 24h)
// after their last write, under a TTL like every key lockgov creates. etcd keeps them
// without a lease, deliberately: there is one of each per WorkerID, a bounded set.
package workerid
