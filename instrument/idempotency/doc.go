// Package idempotency runs a request's effect once per idempotency key:
// retries, retransmits and a second click replay the first result instead
// of running it again.
//
//	s, err := idempotency.New(rdb, idempotency.WithRegisterer(reg))
//	...
//	res, err := s.Do(ctx, key, fingerprint, func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
//		return charge(ctx, a.Fence) // the effect; its result is stored
//	})
//
// A key's record moves through three states, each change one Lua script
// (one round trip): absent -> in progress (an owner token and a lease,
// renewed every third of the lease while fn runs; begin.lua, renew.lua) ->
// completed (result and fingerprint kept for the result TTL; finish.lua),
// or released when fn returns an error (finish.lua), so the next attempt
// runs fn. The record is one hash under one hash tag, so it is Cluster-safe.
// Each change is safe to resend: go-redis resends a command whose reply was
// lost, and a resent begin.lua finds the key claimed by its own owner token
// and runs fn at once with the same attempt number, and a resent finish.lua
// finds the record its first try finished (the owner token stays in it) and
// reports success, not a lost lease.
//
// # Guarantees
//
//   - While the record lives, fn has completed successfully at most once
//     for a key, unless an owner outlives its lease (see below), and every
//     later Do with the same fingerprint returns that result with Replayed
//     true without running fn.
//   - The marker is never set before the effect succeeded: an fn that
//     fails releases the key, so a retry runs it again.
//   - Do waits for an in-flight key until it completes (then replays),
//     is released (then runs fn) or ctx ends (ErrInProgress). It polls with
//     a backoff from 5ms to 250ms, bounded by the owner's remaining lease.
//     NoWait returns ErrInProgress at once.
//   - A key reused with another fingerprint returns ErrFingerprintMismatch,
//     whatever its state.
//   - A result over the size limit (WithMaxResultBytes) is not stored: the
//     key is completed without a body, and this and every later Do return
//     ErrResultTooLarge, since fn's effect happened and must not run twice.
//     Behind the middleware the result is the response as stored, JSON
//     with the body in base64: a body over about three quarters of the
//     limit is too large.
//   - Bad input (empty or oversized key, oversized fingerprint, nil fn)
//     returns an error wrapping ErrInvalid and writes nothing.
//
// # HTTP middleware
//
// Middleware applies Do to POST and PATCH requests carrying an
// Idempotency-Key header (IETF httpapi draft, Stripe's behaviour): the
// key, scoped by WithPrincipal so one tenant can never replay another's
// response, and a fingerprint of method, path, query and body. The first
// response's status, headers (Date included) and body are stored and
// replayed byte for byte; 409 while the first request is in progress
// (NoWait), 422 for a key reused with another request, 400 for a
// malformed key, one too long together with its principal or, with
// RequireKey, a missing one; 5xx responses are not
// stored (the key is released, a retry runs the handler), 4xx are. When
// the store fails the middleware follows the Store's policy: 503 with
// Retry-After (fail closed, the default) or the handler's response
// (fail open). A
// handler that streams (Flush, hijack) is not supported: the response is
// buffered until the handler returns. Request bodies over
// DefaultMaxRequestBytes are refused with 413.
//
// Metrics: lockgov_idempotency_requests_total{outcome} (first, replay,
// in_progress, mismatch, error, degraded, not_replicated) and
// lockgov_store_degraded_total{component="idempotency"}, on the registry
// given with WithRegisterer only. Spans: "idempotency do" (scope
// ScopeName, provider WithTracerProvider) with the outcome; keys and
// fingerprints are never span attributes, metric labels or log fields.
//
// # Store failure
//
// When Redis cannot be reached (a refused or reset connection, a timeout,
// LOADING/CLUSTERDOWN; never an answer such as in progress or mismatch,
// and never the caller's own context ending), WithStoreFailure decides:
//
//   - instrument.FailClosed (the default): Do returns the transport error
//     and does not run fn; the middleware answers 503 with Retry-After 1.
//     If the result could not be stored after fn succeeded, Do returns
//     that error and the key stays in progress until the lease ends; a
//     retry then runs fn again — the fence or a unique constraint must
//     catch it.
//   - instrument.FailOpen: Do runs fn without the check, with Attempt{N: 0,
//     Fence: 0}, and returns its result with Result.Degraded set; a result
//     that could not be stored after fn succeeded is returned the same way
//     instead of an error that would invite a retry, also when the caller's
//     deadline passed while fn ran (the write has its own). The middleware then
//     serves the handler's response. Each such decision is counted
//     (outcome degraded and lockgov_store_degraded_total) and logged at
//     most once a minute with the count and the transport error.
//
// Fail open trades the guarantee for availability: a request retried
// during the outage runs again, and one served during the outage is not
// recorded, so its retry after Redis returns runs again too. Keys
// completed before the outage still replay once Redis is back with its
// data (a restarted Redis without persistence has forgotten them). A
// fenced write refuses Fence 0; rely on a unique constraint downstream.
//
// # Replica acknowledgements
//
// WithReplicaAcks(n, timeout) makes Do run fn only once n replicas have
// its claim of the key, and report a result, run now or replayed, only
// once n replicas have the completed record: each script, a write of the
// record that changes nothing (touch.lua: WAIT is documented to count the
// writes of its own connection, and a replay writes nothing), and WAIT n
// timeout go in one pipeline on one connection. A failover to one of those
// replicas keeps the record, so the retry replays it instead of running fn
// again. Single node and Sentinel (*redis.Client) only; the timeout must
// leave 250ms under the client's ReadTimeout (Redis answers a WAIT that
// timed out at its next timer tick), and the caller's deadline cuts it,
// also for the completed record, whose write outlives that deadline; that
// write runs within the lease (WithLease), which cuts its WAIT too, to the
// lease less 250ms.
//
// When fewer than n replicas acknowledge within the timeout, Do returns an
// error holding a *NotReplicatedError (errors.Is: ErrNotReplicated; with
// context.DeadlineExceeded too when the caller's deadline cut the WAIT, or
// the deadline the write ran under passed before its reply arrived: then 0
// acknowledged, and the text says the count is unknown, never the read's
// i/o timeout as a store failure),
// counted as outcome not_replicated:
//
//   - a claim: fn does not run (a failover would forget the claim and let
//     another attempt run fn beside this one), and the key is released, so
//     a retry runs fn at once as the next attempt;
//   - a completed record (fn ran, or a replay of a record no replica has
//     confirmed yet): Result.Body holds fn's result, and the record stays
//     completed on the primary, so a retry replays it, with success once
//     the replicas have it. The middleware answers 503 with Retry-After,
//     not the handler's response.
//
// It is not a store failure: under WithStoreFailure(instrument.FailOpen)
// Do neither runs fn without the check nor returns a degraded result for
// it (the store answered; a retry replays). A WAIT that fails with a
// transport error after its script answered is treated alike, also when
// go-redis gave the whole pipeline up (the script's answer it read is
// kept: a claim is released without running fn, a completed record's
// result is returned with ErrNotReplicated). A go-redis resend whose own
// script reply is lost is a transport error, as without the option.
// Renewals and releases do not wait: a renewal a failover loses shortens
// the lease on the promoted replica to the previous renewal's (so an owner
// cut off from the replica for about the lease is the slow owner below), a
// lost release leaves the key to its lease.
//
// What it costs and leaves open: every Do pays a WAIT per script (two for
// a first run, one per replay and per poll of a busy key), and while fewer
// than n replicas answer each waits the whole timeout. WAIT does not make
// Redis strongly consistent: a failover may still promote a replica that
// did not acknowledge (Sentinel prefers the most up-to-date one), and the
// primary does not count a replica for about a second after it
// (re)connects.
//
// # Failure modes
//
//   - An owner that dies (process killed, partition) stops renewing: its
//     key stays in progress until the lease ends, by the Redis server's
//     clock, then the next attempt runs fn with a higher N and Fence.
//   - An owner that is only slow may still be running when a successor
//     starts: both fns run. It takes the owner paused, or Redis stopped or
//     out of its reach, for about two thirds of the lease or more, since
//     the lease is renewed every third of it and can end that long after
//     the last renewal. The owner's next renewal then
//     fails and fn's context ends with cause ErrLeaseLost, and its result
//     is discarded, but an effect already made is not undone: guard your
//     own write with Attempt.Fence (keep the highest fence seen, refuse
//     lower ones) or a unique constraint. Fences count up within one
//     record, which lives the result TTL from its last renewal: when an
//     owner is cut off for longer than that, its successor's fences start
//     again at 1, no higher than the owner's, and only the unique
//     constraint tells them apart.
//   - Redis Cluster resharding: a record is one key, so every script
//     follows the ASK or MOVED to the node that has it and none is ever
//     refused; a Do whose record moves while fn runs keeps its lease and
//     finishes on the new node, and fn runs once
//     (TestDo_AcrossASlotMigration).
//   - Redis unreachable: see "Store failure" above.
//   - Failover with asynchronous replication (the default) can lose a
//     completed record not yet replicated: a retry then runs fn again
//     (TestFailover_DefaultLosesACompletedRecord), and a lost claim lets a
//     second attempt run fn beside the first. With WithReplicaAcks a result
//     Do reports without error is on n replicas, and fn runs only on a
//     claim that is; a record Do reported as ErrNotReplicated is lost by a
//     failover to a replica that lacks it, and its retry runs fn again.
//   - A record expires after the result TTL (WithResultTTL): a retry after
//     that runs fn again.
//   - Eviction: every record has a TTL, so a Redis with maxmemory and any
//     maxmemory-policy but noeviction (volatile-lru, AWS ElastiCache's
//     default, as much as allkeys-*) may evict it when memory is full, and
//     the store cannot tell an evicted record from a key never used. A
//     completed record evicted: the next Do with its key runs fn again, not
//     replayed, with N and Fence starting again at 1
//     (TestEviction_ACompletedRecordEvictedRunsFnAgain). A record evicted
//     while its fn runs: a second Do claims the key at once and runs fn
//     beside the first, with the same Fence; the first learns it at its
//     next renewal (fn's context ends with ErrLeaseLost, Do returns
//     ErrLeaseLost, its result discarded) and the second's result is the
//     one kept
//     (TestEviction_AnInFlightRecordEvictedLetsASecondAttemptRunBesideTheFirst).
//     Attempt.Fence does not tell the two apart: only a unique constraint
//     in your own store does. Run the Redis with noeviction (a full Redis
//     then refuses new claims with an OOM error, a store failure); the
//     agent reports a store with eviction on (detector "store", kind
//     eviction_enabled).
package idempotency
