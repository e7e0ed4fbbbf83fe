// Package quota deducts from integer balances (stock, quota, credit) kept
// in Redis, atomically and at most once per request id.
//
//	q, err := quota.New(rdb, quota.WithShards(8), quota.WithRegisterer(reg))
//	...
//	_ = q.Set(ctx, "stock:sku-1", 10_000)
//	left, err := q.Deduct(ctx, "stock:sku-1", 1, orderID)
//	if errors.Is(err, quota.ErrInsufficient) { /* sold out */ }
//
// # Guarantees
//
//   - No oversell: a deduction checks and takes in one Lua script
//     (deduct.lua), so a balance never goes below zero, whatever the
//     concurrency, on one node, in sharded mode and on a Cluster.
//   - One effect per request id: Deduct and Refund record each request id
//     (with its amount and answer) in the same script and the same hash
//     slot as the balance it changed. A retry within the request TTL
//     (WithRequestTTL, 24h by default) changes nothing and returns the
//     first answer, ErrInsufficient included; the same id with another
//     amount is ErrRequestIDReused.
//   - One effect per call where there is no request id: go-redis resends
//     a command whose reply was lost (a read timeout, a reset connection)
//     on another connection, after the script may have run. Add's credits
//     and Rebalance's takes and credits each carry a random record, so a
//     resend finds the first run's record and changes nothing: an Add is
//     credited once, and Rebalance neither loses the units of a take it
//     did not hear (they would be taken twice and credited once) nor
//     credits a shard twice (units that were never there, an oversell). A
//     caller's own retry of Add is a new call; Set is absolute, so a resend
//     sets the same balance again.
//   - Hot keys scale: WithShards(n) keeps a key in n buckets, each in its
//     own Cluster hash slot. A deduction starts at a shard chosen from its
//     request id (no global lock) and falls back across every shard before
//     it reports ErrInsufficient, so with amounts of 1 nothing is refused
//     while any unit is left. A retry visits the shards in the same order
//     and finds the record of the shard that served it.
//   - Bad input (amount <= 0 or over MaxAmount, an empty or oversized key
//     or request id) returns an error wrapping ErrInvalid and writes
//     nothing; a credit that would take a bucket (a shard, in sharded
//     mode) past MaxAmount returns ErrOverflow and writes nothing.
//
// Metrics: lockgov_quota_deduct_total{key_pattern, result} (ok,
// insufficient, replay, replay_insufficient, error, invalid, degraded,
// not_replicated) and
// lockgov_store_degraded_total{component="quota"}, on the registry given
// with WithRegisterer only. key_pattern is the first pattern of WithPolicy
// the key matches, else the key with its ids normalised away, capped ("other"
// past the policy's MaxPatterns). Spans: "quota deduct" and "quota refund"
// (scope ScopeName, provider WithTracerProvider) with the key pattern,
// amount and result; raw keys and request ids are never attributes, labels
// or log fields.
//
// # Store failure
//
// Deduct fails closed: when Redis cannot be reached it returns the
// transport error and nothing is deducted anywhere. There is deliberately
// no fail-open switch: a deduction approved without the balance is an
// oversell, which is what this package exists to prevent. A caller that
// must keep selling during an outage passes WithFallback: the fallback —
// a small per-process allowance, a database path, a queue for later — then
// decides each deduction Redis could not (transport errors only; never
// ErrInsufficient or ErrRequestIDReused, never the caller's context ending),
// each counted (result degraded and lockgov_store_degraded_total) and
// logged at most once a minute. The fallback owns what it approves: those
// deductions are not in Redis, so reconcile them against the ledger when
// Redis returns. Refund, Set, Add, Remaining and Rebalance always fail
// closed; a Refund retried with its request id after the outage credits
// once.
//
// # Replica acknowledgements
//
// WithReplicaAcks(n, timeout) makes Deduct and Refund tell the caller they
// succeeded only once n replicas have the write: the script, a write of
// its request-id record that changes nothing (touch.lua: WAIT is documented
// to count the writes of its own connection, and a retry that replays a
// record writes nothing), and WAIT n timeout go in one pipeline on one
// connection. A failover to one of those replicas keeps the deduction and
// its record, so the retry replays it. Single node and Sentinel
// (*redis.Client) only; the timeout must leave 250ms under the client's
// ReadTimeout (Redis answers a WAIT that timed out at its next timer
// tick), and a caller's deadline shorter than the timeout cuts it.
//
// When fewer than n replicas acknowledge within the timeout, the write
// has run on the primary and the call returns an error holding a
// *NotReplicatedError (errors.Is: ErrNotReplicated; with
// context.DeadlineExceeded too when the caller's deadline cut the WAIT, or
// passed before its reply arrived: then 0 acknowledged, and the text says
// the count is unknown, never the read's i/o timeout as a store failure),
// counted as result not_replicated. It is never ErrInsufficient, even when
// the primary refused the amount: the answer is not yet safe either way.
// Retry with the same request id: it applies at most once, and it
// succeeds, with the first answer, once the replicas have the record. It
// is not a store failure: WithFallback never decides it (the deduction is
// in Redis; a fallback's would be a second one). A WAIT that fails with a
// transport error after the script answered is treated alike: the caller
// gets ErrNotReplicated with that error, not the fallback, also when
// go-redis gave the whole pipeline up (it marks every command with the
// WAIT's error; the script's answer it read is kept). A go-redis resend
// whose own script reply is lost is a transport error, as without the
// option, even when an earlier try heard the script.
//
// What it costs and leaves open: every Deduct and Refund pays the WAIT
// (the replicas' round trip), and while fewer than n replicas answer each
// waits the whole timeout; a sharded Deduct that falls back across shards
// waits once per shard it visits, and a shard's refusal must be
// acknowledged before the next shard is tried: the refusal's record is
// what sends a retry past that shard, and a failover that lost it while
// keeping the next shard's deduction would let the retry deduct on the
// first shard too once a refund filled it. An unacknowledged refusal is
// ErrNotReplicated with nothing deducted. WAIT does not make Redis strongly
// consistent: a failover may still promote a replica that did not
// acknowledge (Sentinel prefers the most up-to-date one), and the primary
// does not count a replica for about a second after it (re)connects. Set,
// Add and Rebalance do not wait: an Add's retry is a second Add, so an
// error inviting one would credit twice.
//
// # Failure modes
//
//   - Redis unreachable or a timeout: Deduct returns the transport error
//     (or the fallback's answer). The script may or may not have run;
//     retry with the same request id and it applies at most once. A
//     deduction decided by the fallback after a timeout whose script did
//     run is applied twice, once in Redis and once by the fallback: the
//     reconciliation must catch it.
//   - Redis Cluster resharding of a balance's slot (the bucket and its
//     request-id records share its hash tag): while the bucket and a
//     request's record are on different nodes, or the record does not
//     exist yet (a new request id), Redis refuses deduct.lua with
//     TRYAGAIN: Deduct returns that error, nothing was deducted, and a
//     retry with the same request id after the slot has moved deducts
//     once (TestDeduct_AcrossASlotMigration). Such a refusal counts as the
//     store not serving: WithFallback decides it, as in an outage, for as
//     long as the slot is open.
//   - Failover with asynchronous replication (the default): a deduction
//     acknowledged by the old primary and not yet replicated is lost with
//     its request-id record, so the units come back and a retry of that id
//     deducts again (TestFailover_DefaultLosesAnAcknowledgedDeduction). The
//     balance never goes negative, but an application that needs an exact
//     ledger must reconcile against its own (a unique request id in a
//     database), or use WithReplicaAcks: a deduction it reports as done is
//     on n replicas, and one it reports as ErrNotReplicated is lost by a
//     failover to a replica that lacks it, its retry deducting there anew.
//     Set, Add and Rebalance lost in a failover leave the balances the
//     promoted replica has, with or without the option.
//   - Sharded mode: an amount larger than every single shard's balance is
//     ErrInsufficient even when the shards add up to more (no deduction
//     spans shards). Remaining sums the shards in one pipeline, not one
//     atomic read. Set and Add write the shards one by one. Rebalance
//     takes units from rich shards before it credits poor ones: a process
//     that dies in between loses the units in transit, and a deduction
//     running meanwhile may see less than the total.
//   - A key containing '}' ends the hash tag early: all its shards then
//     share one slot (still correct, no longer spread over a Cluster). A
//     key that starts with '}' leaves the tag empty: on a Cluster its
//     bucket and its records then hash to different slots and every call
//     fails with CROSSSLOT, writing nothing; use such keys on one node.
//   - Request-id records expire after the request TTL: a retry after that
//     is a new request. A different WithShards or WithPrefix for the same
//     key reads other buckets.
//   - Every record costs memory until its TTL: size the TTL to the retry
//     window of your clients. Add and Rebalance leave one record per shard
//     they touch, living until the caller's deadline plus a minute, never
//     longer than the request TTL (the request TTL when the context has no
//     deadline): give them a deadline. The minute is for a resend go-redis
//     sent before the deadline that a stalled redis-server runs late: a
//     server stalled for longer than that, or than a shorter request TTL,
//     with such a resend in its input buffer runs it as a new call.
//   - Eviction: request-id records have a TTL (the request TTL), balances
//     have none. Under a volatile-* maxmemory-policy (volatile-lru is AWS
//     ElastiCache's default) a full Redis evicts the records and keeps the
//     balances: a retry of a Deduct or Refund whose record was evicted is a
//     new request and applies again, with no error and no replay result
//     (TestEviction_AnEvictedRecordDeductsARetryTwice). No oversell: a
//     balance still never goes below zero. Under allkeys-* (a shared cache
//     Redis) the balance itself may go: Deduct then answers
//     ErrInsufficient, which reads as sold out, Remaining answers 0, and a
//     Refund or Add creates a balance of its own amount alone; the units
//     the evicted balance held are gone until Set writes it again
//     (TestEviction_AnEvictedBalanceReadsAsSoldOut). Run the Redis with
//     noeviction (a full Redis then refuses deductions with an OOM error, a
//     store failure); the agent reports a store with eviction on (detector
//     "store", kind eviction_enabled).
package quota
