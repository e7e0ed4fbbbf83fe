// Package agent is the runtime of `lockgov agent`: it opens the stores,
// elects one leader among the agents that share them, runs the detectors
// every interval, and serves what they found over HTTP.
//
//	a, err := agent.Start(ctx, agent.Config{Redis: []string{"redis://10.0.0.5:6379"}})
//	...
//	defer a.Close()
//
// # Stores
//
// --redis URL (repeatable): redis:// or rediss:// (TLS) for a single node,
// ?cluster=1 for a Cluster (every such URL is a seed of one Cluster; more
// seeds with &addr=host:port), redis-sentinel://h1:26379,h2:26379/MASTER for
// Sentinel. --etcd: comma-separated http(s)://[user:pass@]host:port of one
// etcd cluster. Credentials live in the URLs; store names in logs, metrics
// and answers are the URLs without user, password or query. With no store
// the agent starts an embedded single-node etcd (this is the only package
// that links the etcd server) with its data under
// os.UserCacheDir()/lockgov/etcd, and logs the endpoint to give processes
// and further agents.
//
// # Console
//
// / is the console: one embedded page, script and stylesheet (no framework,
// nothing loaded from elsewhere) that reads /api/v1/findings, /api/v1/locks
// and /api/v1/instances every 3 seconds and shows findings by severity with
// their action, live locks, instances with their skew tier and offset,
// WorkerIDs per service and the wait-for cycle of a deadlock, filtered by
// store, service and pattern. /api/v1/findings says "remediation": true
// when the agent has a remediation token; only then does the console show
// delete buttons on immortal locks, each asking for confirmation and for the
// token (kept in the tab's sessionStorage), and sending the version of the
// lock it shows as If-Match: on 412 it says the lock changed and refreshes.
//
// # Guarantees
//
//   - One leader at a time per coordination store (the etcd cluster if one
//     is given, else the first Redis): etcd's concurrency.Election, or on
//     Redis a redislock lock renewed by its watchdog. Only the leader runs
//     detectors and exports lockgov_findings and lockgov_clock_skew_seconds,
//     so a sum over agents counts each finding once; lockgov_agent_leader
//     says which agent it is.
//   - The leader publishes each scan (findings, a bounded lock inventory,
//     instances from heartbeats) to the coordination store under a TTL of
//     three intervals, fenced: a write from a deposed leader is refused
//     (etcd: a transaction on its leader key's revision; Redis: a script
//     comparing fences). Followers serve the last record they read and
//     answer "leader": false.
//   - An instance is a heartbeat key under a TTL (a lease on etcd), as for
//     the detectors: a key without one proves no live process, and is
//     neither listed nor given a lockgov_clock_skew_seconds series.
//   - A leader that stops (Close, or its context ends) resigns: another
//     agent leads within one interval (its wait is woken by the resignation).
//   - Every store is pinged every interval, each ping bounded by the scan
//     timeout and at most half an interval: /readyz answers 503 naming the
//     store and the error within two intervals of a store going down (at
//     most one interval to the next check, half of one for its ping to time
//     out), and 200 again once it answers. The process stays up;
//     lockgov_agent_store_up{store} follows the same checks.
//   - Every Redis store is checked for eviction at each scan (detector
//     "store": maxmemory with a maxmemory-policy other than noeviction is an
//     eviction_enabled finding, critical while evicted_keys rises between
//     scans; a store that refuses INFO is eviction_unknown, info, and the
//     scan still counts). The leader exports what it read as
//     lockgov_agent_store_maxmemory_policy{store, policy} (1 for the
//     current policy, "unknown" when refused),
//     lockgov_agent_store_maxmemory_bytes{store} (absent while unknown) and
//     lockgov_agent_store_evicted_keys_total{store} (the rises it saw;
//     created at 0 by its first scan of the store). An agent that leads
//     again after another agent led counts afresh (its first scan of the
//     term counts no rise): the other counted and reported what was
//     evicted meanwhile; without another leader it counts the gap. Labels are store names
//     and policy names only, never keys. It reads INFO, never CONFIG GET
//     (detectors.StoreConfig says why); the documented ACL has +info.
//   - Owner tokens are never in an answer, a log line or a metric: locks are
//     read through redislock.DecodeValue and etcdlock.DecodeValue, which drop
//     them. The remediation token is compared in constant time and never logged.
//   - Every key an answer names round-trips. A key that is not valid UTF-8
//     (another application's, under a scanned pattern) is written by
//     /api/v1/findings, /api/v1/locks and the remediation answer as "key"
//     with U+FFFD in place of each bad byte, as encoding/json writes it,
//     which may be another lock's key, and as "key_base64", the standard
//     base64 (RFC 4648, padded) of its bytes; a UTF-8 key has no key_base64.
//     A client acting on a key sends key_base64 when it is there:
//     DELETE /api/v1/locks?key_base64=B (percent-encoded: a "+" unescaped in
//     a query reads as a space). A key_base64 that does not decode, or that
//     names another key than a key= sent with it, is 400 saying which; a
//     key= with U+FFFD that names no lock is 404 pointing at key_base64. The
//     console shows such a key with \xNN escapes and deletes it by
//     key_base64. Its log lines carry key_base64 too (slog's JSON handler
//     writes U+FFFD; the text handler quotes the bytes). Its key_pattern is
//     a declared pattern that matches it, else "other"; no metric carries a
//     key.
//   - Remediation (DELETE /api/v1/locks?key=K, or ?key_base64=B) is off
//     unless the agent has a remediation token; without a valid bearer
//     token it answers 401. It deletes only a lock without a TTL, and only
//     if the lock's value (etcd: the entry's revision and value) is still
//     the one it read, so a lock taken by a new holder meanwhile is never
//     deleted. Each deletion is
//     logged with the key, pattern and holder. A lock found gone by the
//     delete itself answers 410 and is logged too: on Redis that is also
//     what a resent delete sees after its first run deleted the lock (its
//     reply lost), so the audit log misses no deletion. On etcd, K is the
//     lock key of etcdlock's entries, or, for an entry another writer put
//     under the prefix, its whole etcd key, as the immortal finding and
//     /api/v1/locks name it; the delete is one transaction on the entry's
//     mod revision, value and missing lease as read, so an entry put again
//     meanwhile (another value, the same one, or under a lease) is kept
//     (409), and one deleted meanwhile is 410.
//   - Every lock /api/v1/locks lists (and `lockgov locks ls|show -o json`
//     prints) has a "version", and so has every finding on a lock without a
//     TTL: an opaque string naming the lock's current value, compared for
//     equality only. On Redis it is the SHA-1 of the value in lowercase hex
//     (40 digits; what redis.sha1hex computes in a script), on etcd the
//     holder entry's mod revision in decimal, which every write of the
//     entry changes. It never is the value or its owner token: a lockgov
//     token has 128 random bits, and SHA-1 serves only as an equality check
//     here (a value of another application with little entropy can be
//     guessed from its digest, as from any digest).
//   - Remediation takes that version as its precondition, as HTTP's ETags
//     and Kubernetes' resourceVersion do: with If-Match: "VERSION" the lock
//     is deleted only if it is still at VERSION, so an immortal lock that
//     another application replaced by another one after the operator looked
//     is kept. The check is atomic with the delete: the agent compares the
//     version with its own read, and the delete (the script's exact compare
//     of the value read; etcd's transaction on the mod revision read) then
//     deletes only that read. A lock at another version is 412 Precondition
//     Failed, naming the version, holder, fence and TTL it has now, with
//     that lock as "current"; one that changes between the read and the
//     delete is 412 too. A lock at VERSION that got a TTL is 409, one gone
//     404 or 410, as without If-Match (RFC 9110 would answer 412; these say
//     more). An If-Match that is not one quoted,
//     strong version of the store's form (unquoted, W/"…", "*", a list, two
//     headers, empty, a Redis digest sent for an etcd store or the reverse)
//     is 400 saying what is wrong; nothing is read. Without If-Match the
//     delete is as before: "unchanged" is since the agent's read, which the
//     request makes, so a lock replaced between the operator's look and the
//     request is the one deleted (lockgov never writes a lock without a
//     TTL: only another application's can be replaced that way). The
//     console always sends the version; a record published by an agent
//     without versions has none, and its buttons delete without one.
//
// # Failure modes
//
//   - A leader that dies without resigning (SIGKILL, partition) holds its
//     leadership until its lease runs out: max(interval, 1s), rounded up to
//     whole seconds on etcd. Meanwhile followers serve its last record, which
//     expires after three intervals.
//   - A leader paused past its lease may finish a scan after another agent
//     took over; the fenced write drops its record, but its own answers show
//     that stale scan until it notices (at the latest, its next interval).
//   - A store down or slow during a scan: every detector, and each store's
//     lock inventory and heartbeat read, runs side by side under its own
//     scan timeout, so what does not read that store completes (before,
//     the detectors ran one after another under one timeout, and the first
//     that waited on a paused store left every later one a dead context).
//     The scan records the errors (in "errors" of /api/v1/findings, and per
//     detector in "detectors") and the results that completed; the next
//     scan retries. A detector that did not complete keeps the findings of
//     its last completed run in this term, in the answer with "stale": true
//     and "detected_at", and in lockgov_findings, so an alert's `for:` does
//     not start over at every timeout; a new leader starts from the last
//     record it served. lockgov_agent_detector_last_success_timestamp_seconds
//     {detector, store} is when each last completed (0: not since this agent
//     took the lead, nor in the last record it served before),
//     and LockgovAgentScanIncomplete fires on it. The detectors that read
//     heartbeats (locks, clock, deadlock, workerid) read every store's;
//     when some do not answer they go on with the others and return
//     detectors.PartialError: the scan publishes their findings fresh and
//     keeps stale only the earlier ones the error's scopes cover (what
//     could not be checked: holder_dead of a lock whose holder may publish
//     into the unread store, that store's skew and WorkerID findings, any
//     duplicate or deadlock) and that were not made again. A partial run
//     is not a completed one: its error is in "detectors", and the
//     detector's last success and gauge stay at its last complete run, so
//     LockgovAgentScanIncomplete still says that a store's heartbeats go
//     unread (a separate "partial" status would let it fall silent while
//     holders there cannot be told from dead ones). A locks detector whose
//     own store fails completes nothing.
//   - scan_timeout (Config.ScanTimeout) longer than the interval is an
//     error naming both, as Prometheus refuses a scrape_timeout longer than
//     its scrape_interval; unset, it is the interval.
//   - When the coordination store is down, no agent can lead or publish:
//     every agent keeps serving the record it has, and /readyz says why.
//   - The lock inventory scans Redis with SCAN (never KEYS) in batches of
//     1000 with pipelined PTTL and GET, so memory is bounded by a batch; the
//     record keeps the first 1000 locks (locks_truncated says when there were
//     more). It scans the keyspace once per interval on top of the detectors.
//   - The listen address is bound before Start returns: a port in use is an
//     error naming --listen.
package agent
