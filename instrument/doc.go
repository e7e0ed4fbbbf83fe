// Package instrument is lockgov's governed lock API: the Locker and Lease
// contract every backend implements, Govern that wraps any Locker with the
// three rules, and Do that runs a function under a lock.
//
//	raw, _ := redislock.New(rdb)                     // or etcdlock.New(etcd)
//	locker := instrument.Govern(raw,
//		instrument.WithPolicy(pol),                  // policy.Load("lockgov.yaml")
//		instrument.WithRegisterer(registry))         // your Prometheus registry
//
//	ctx, cancel := context.WithTimeout(ctx, 3*time.Second) // rule 1: a timeout
//	defer cancel()
//	err := instrument.Do(ctx, locker, "lock:quota:"+merchantID, func(ctx context.Context) error {
//		// ctx ends with ErrLockLost if the lock is lost while this runs;
//		// pass lease fences to the store where it can check them.
//		return deduct(ctx, merchantID, amount)
//	})
//
// What a service uses: Locker and Lease, Govern (NewGoverned to see a
// configuration error up front), Do, ContextWithLease, FromFunc for lock
// code it already has, the AcquireOptions (WithTTL, FailFast, Retry,
// WaitUntilDeadline, WithMaxHold, WithoutWatchdog, WithMeta, ...), the
// Options of Govern (WithPolicy, WithRegisterer, WithTracerProvider, ...)
// and the errors. The rest of the package is for whoever implements a
// Locker: see "Writing a backend" below.
//
// # The three rules
//
// Timeout: an Acquire whose context has no deadline is refused with
// ErrPolicy in enforce mode, counted and logged (once a minute per pattern)
// in audit mode, ignored when off; the TTL must lie within the pattern's
// bounds. Modes come per key pattern from the policy.
//
// Fallback release: Do releases on return and on panic (and re-panics); a
// lease dropped without Release is noticed when it is garbage-collected,
// counted in lockgov_lease_leaked_total, logged and released; the TTL is the
// last net when the process dies. None of these releases can delete the
// next holder's lock after a loss: the backends' releases are owner-checked,
// and FromFunc, whose wrapped unlock may not be, no longer calls it once its
// lease has ended (Release returns ErrNotHeld).
//
// Trace propagation: "acquire lock" and "release lock" spans are children of
// the caller's span; renewals and loss are events on the caller's span. The
// acquire span of a lease ends when Acquire returns (its end timestamp) but
// reaches the span processor with the release span, or at the lease's first
// renewal or its end if that comes first: a batching processor's goroutine
// is then woken once per lease, not twice (see leaseObserver.deferSpanEnd).
// The trace id (and whatever the configured propagators inject) is written
// into the lock value so an operator can find the holder's trace; histograms
// carry a trace_id exemplar when the caller's span is sampled (at most one
// per bucket per second: Prometheus keeps only a bucket's latest). While the tracer
// provider is a no-op (noop.TracerProvider, or the otel global provider
// before otel.SetTracerProvider) and the caller's span is not recording,
// Govern starts no spans at all, since nothing would record them; the trace
// id and propagated headers in the lock value are still the caller's, taken
// from its span context.
//
// # Metrics
//
// Govern never registers on the global Prometheus registry: pass
// WithRegisterer. Labels are bounded: backend, lock_pattern (a declared
// policy pattern, else a normalised key such as lock:order:{id}, else
// "other" past the policy's cap) and a result from a fixed set. Owner tokens
// and raw keys never appear in labels, span attributes or logs. Decision:
// the issue allowed a MeterProvider or a Registerer; lockgov uses
// client_golang directly because its exemplars and its cost on the hot path
// are what the benchmarks in docs/BENCHMARKS.md measure.
//
// # Re-entrancy
//
// A lease's Context, the context Do passes to fn, and any context made with
// ContextWithLease carry the lease. An Acquire of the same key through the
// same Governed with such a context (or one derived from it) re-enters: it
// returns a handle on the same lock and fence at once, the hold count goes
// up, and the lock is released when the last handle is released. Go has no
// goroutine identity, so the context decides who re-enters: every goroutine
// that has such a context does, whichever goroutine it is.
//
// Decision: such goroutines exclude each other. A re-entrant hold's own
// Context carries that hold; below any hold (the root lease, or a re-entrant
// one) at most one re-entrant hold is open at a time, and another Acquire
// through the same hold waits until it is released (FailFast: ErrNotAcquired
// at once; otherwise until ctx ends, ErrNotAcquired; if the lease ends
// meanwhile, it acquires from the backend). So workers that fn starts with
// its context and that lock the key again take turns, as they would across
// processes, while nested code that passes on the context of the hold it is
// in (the re-entered lease's Context, or a nested Do's fn context) goes
// straight in. Code that re-enters twice with the same outer context without
// releasing the first hold waits for itself until ctx ends. A hold released
// before one nested in it keeps its place until that one is released too.
// The root holder itself (fn) is not excluded from its re-entrant holds: it
// holds the lock for all of them, as a goroutine that holds a mutex and
// starts workers does.
//
// Clock skew (WithSkewSource): in the policy's reject tier Acquire returns
// ErrClockSkew; in the degrade tier a new lease's TTL is
// policy.SkewTiers.DegradeTTL of it, but never below the pattern's min_ttl
// (nor the 3 ms a backend accepts), and never above the TTL asked for.
//
// Fleet heartbeat: a governed Locker that knows its store (FleetStorer:
// redislock and etcdlock do; a Redlock quorum does not) joins the process's
// heartbeat on that store (package fleet): one key per process and store,
// however many Lockers, listing the locks held and the keys goroutines wait
// for, with the keys each waiter already holds (the wait-for graph), and
// never an owner token. Its measured clock offset is the skew source unless
// WithSkewSource gives one; WithoutHeartbeat turns it off, WithHeartbeat
// configures it, (*Governed).Close ends the Locker's share (a collected
// Governed ends it too).
//
// # Failure modes
//
// The skew tier is as fresh as the last heartbeat's measurement (one
// interval, default 5s); before the first one no tier applies. A store that
// cannot be reached keeps the last measured tier. Acquire never waits for
// the heartbeat.
//
// A lease's Context ends with ErrLockLost at the latest when local monotonic
// time passes the last confirmed expiry minus a drift margin, which is
// before the store can hand the lock to anyone else. Work that must not run
// after a loss checks that context, and passes Fence to the resource so a
// stale holder (one paused by GC past its TTL, say) is refused there: a lock
// alone cannot stop a paused process from writing.
//
// Do judges a loss by the lease's state when fn returns: ErrLockLost if the
// lease had ended with it by then, or if the release found the lock no
// longer held (Do cannot tell when it went). A release that fails otherwise
// (a transport error, a lost reply) is returned as it is: fn finished under
// the lock, and the store's TTL frees the lock if the release did not get
// through. Callers that redo work on ErrLockLost do not redo it then.
//
// FromFunc cannot add what the wrapped code lacks: no renewal (the lease
// ends at FuncTTL), no fence, and no owner check on unlock. It never calls
// the unlock after FuncTTL has passed, and bounds the unlock's context by
// that deadline, but an unlock sent just before the deadline can still
// reach the store after the TTL and, without an owner check, delete the
// next holder's lock.
//
// # Store failure
//
// What Acquire does when the governed Locker's store cannot be reached (a
// refused or reset connection, a timeout, a server answering LOADING or
// CLUSTERDOWN) is the caller's choice, set with WithStoreFailure:
//
//   - FailClosed (the default): Acquire returns the transport error. Do
//     does not run fn.
//   - FailOpen: Acquire falls back to a process-local lock on the key, with
//     the same wait strategy (FailFast, Retry, WaitUntilDeadline), metrics
//     and spans (attribute lock.degraded; a caller waiting there counts in
//     lockgov_lock_waiters). Its lease has Fence 0, so a write
//     guarded by the fence refuses it; Release and the release of a dropped
//     handle work as for any lease. Every such decision (a grant, or a
//     refusal by the process-local lock; not a caller whose own context
//     ended first, who decided nothing) is counted in
//     lockgov_store_degraded_total{component="lock"} (LockgovLockStoreDegraded
//     pages on it) and logged at most once a minute with the count and the
//     transport error (never the key or a token). The process's heartbeat
//     lists the fallback lease and a wait for a fallback lock with
//     "fallback": true (fleet.HeldLock.Fallback), so that the agent's
//     deadlock detector never joins them to another process's locks on
//     the key.
//
// Only transport failures degrade: ErrNotAcquired, a policy refusal and the
// caller's own context ending are returned as they are. An error that joins
// several (lock code under FromFunc that joins its client's error with
// ErrNotAcquired) degrades when any of them is a transport failure, wherever
// it sits in the join, unless one is a context.Canceled or
// context.DeadlineExceeded: that is taken for the caller's giving up.
// FailOpen keeps mutual exclusion only inside one process: two instances may
// both enter the critical section while the store is down, and a
// process-local lease taken during the outage is not seen by a Redis lease
// taken after the store returns (each new Acquire goes to the store again at
// once). The other way round it is: a store lease this Governed granted and
// that is still valid when the store goes down (its TTL has not run out)
// excludes the fallback Acquires of its key in this process, which wait for
// it as for a process-local lease (FailFast: ErrNotAcquired) until it is
// released, lost or expires; one granted beside a process-local lease does
// so from that lease's release on. Use it for work where a duplicate is
// caught further down (a unique constraint, reconciliation), never for
// money or stock without such a net. An etcd client waits for an unreachable cluster
// until the context ends (its DialTimeout bounds clientv3.New only), so
// etcdlock bounds each round trip of an Acquire itself
// (etcdlock.WithRequestTimeout, default 5 s: the lease grant, the put, a
// waiter's reads of the queue and the creation of its watch, not the wait
// for the holder): one that etcd has not answered by then while the
// caller's context has time left, or that etcd answers with
// codes.Unavailable (no leader, leader changed, request timed out), is a
// store failure, and reads that keep failing end a wait once they have
// failed for that long. An etcdlock.FromMutex adapter does so only when
// given etcdlock.WithRequestTimeout (it keeps the adapted Mutex code's
// behaviour by default: ErrNotAcquired with the caller's error when etcd is
// down); concurrency.Mutex runs its put, reads and wait on one context, so
// the adapter bounds each TryLock and probes etcd while Lock waits.
// A redislock quorum (NewQuorum) is out of reach when so many of its nodes are
// (refused, no answer within the node timeout) that the others cannot make a
// majority; a majority that answers that the lock is held is ErrNotAcquired.
//
// # Writing a backend
//
// A backend implements Locker; its Acquire:
//
//   - calls ValidateKey before any round trip, and ApplyAcquireOptions to
//     resolve the options (defaults applied, validated; the resulting
//     AcquireConfig's Observer is never nil);
//   - waits as AcquireConfig.Wait says (woken by release notifications,
//     polling at most every PollInterval), renews every TTL/3 unless
//     NoWatchdog, stops renewing at MaxHold;
//   - writes TraceID and Meta into the lock value (instrument/lockvalue),
//     never the owner token anywhere else;
//   - tells the Observer about each attempt, waiting, renewal, loss and
//     leak, and returns leases whose Context ends with ErrLockLost or
//     ErrReleased and whose Release and Refresh are owner-checked
//     (ErrNotHeld otherwise);
//   - may report its metric label through a Backend() string method.
//
// Govern hands a backend the configuration it resolved from the policy
// through WithConfig; ObserverFuncs is an Observer for backends' tests.
// lockgov's own backends build their leases on one lease lifecycle
// (instrument/internal/leasecore) and run the conformance suite
// (internal/locktest); a backend outside this module adapts its lock with
// FromFunc, which runs on that lifecycle too. The doc comment of each of
// these identifiers (AcquireConfig, Observer, ObserverFuncs, WithConfig,
// ApplyAcquireOptions, ValidateKey, LockerFunc) starts by saying it is for
// backend authors.
//
// Decision: they stay in package instrument, in this section, rather than
// in a package of their own. AcquireOption's unexported apply method ties
// them together: only instrument can resolve the options users pass to a
// backend, so a separate package would need AcquireOption and
// AcquireConfig re-exported as type aliases, which users would then see in
// both places anyway.
package instrument
