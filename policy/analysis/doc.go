// Package analysis holds the analyzers behind `lockgov vet`: static checks
// that find, in existing Go code, the lock, ID and token mistakes the spec's
// incidents came from, before they page someone.
//
// # Analyzers
//
// Each is a golang.org/x/tools/go/analysis Analyzer with its own doc:
//
//	setnxexpire        SETNX (or SET without EX/PX) then a separate EXPIRE on the same key
//	unsafeunlock       DEL on a lock key, alone or after a GET, instead of an owner-checked script
//	blindrenew         EXPIRE on a lock key in a loop, ticker or goroutine, without an owner check
//	nodeadline         a lock acquisition whose context has no deadline
//	missingrelease     an acquired lease or mutex not released on every path (or not by defer)
//	globallockkey      a constant lock key in a function that works on one entity (orderID)
//	markerbeforewrite  an idempotency marker set before the write it guards, kept when it fails
//	uncheckedtxn       an etcd create-if-absent Txn whose Succeeded is never read
//	snowflakeclock     (opt-in) a time.Now-based ID generator with no backwards-clock check
//
// Every finding names the rule it breaks: timeout, fallback release (the
// policy's musts), owner-checked release, owner-checked renewal, key
// granularity, idempotency, mutual exclusion, unique ids (the properties
// the spec asks of a lock, a token and an ID). The rule is the diagnostic's
// Category and ends its message, "(rule: timeout)", so go vet shows it too.
// Where the fix is mechanical the finding carries a SuggestedFix: SET NX PX
// in one call (setnxexpire), the compare-and-delete script in place of the
// DEL when the owner token is known (unsafeunlock), a deferred release
// after the acquisition (missingrelease), the id in the key
// (globallockkey), deleting the marker on the error path
// (markerbeforewrite).
//
// # What is recognised
//
// Calls are matched by type, by the package path of the called function:
// go-redis v9 (github.com/redis/go-redis/v9) and v8
// (github.com/go-redis/redis/v8) on any client type (*redis.Client,
// UniversalClient, Cmdable, ClusterClient, pipelines, Client.Do with the
// command as a constant), etcd concurrency.Mutex and clientv3 Txn,
// redsync (github.com/go-redsync/redsync/v4), bsm/redislock, and lockgov's
// own instrument Locker.Acquire and instrument.Do. Nothing is matched by
// method name alone.
//
// Lock keys. A Redis command is about a lock when its key is a lock key.
// The key expression is followed through constants, string concatenation,
// fmt.Sprintf and local variables assigned once. With a policy file
// (-policy), a key whose constant prefix matches one of the policy's
// declared patterns is a lock key ("quota:"+id under "quota:{merchant_id}"),
// and nothing else with a constant prefix is. Without one, a key whose
// constant text has a lock word (lock, locks, mutex, redlock, as a
// ':'-, '/'-, '_'- or camelCase-separated word: "lock:order:", "orderLock")
// is a lock key. In both modes a key with no constant prefix (l.key,
// lockKey) is judged by the names in it, the named type it is a field of
// (RedisLock) and the enclosing function's name (Unlock). The keys of
// typed lock APIs (etcd, redsync, bsm, lockgov) are lock keys by
// definition.
//
// Test code is skipped unless -tests: _test.go files, and files that
// import "testing" (conformance suites); tests delete and expire locks on
// purpose.
//
// # Drivers
//
// Vet is the standalone driver behind `lockgov vet [-json] [-policy FILE]
// [-enable snowflakeclock] [-tests] [packages]`: it loads the packages with
// go/packages (dependencies from export data, so the go command compiles
// them) and runs the analyzers with x/tools' checker. VetToolMain is the
// `go vet -vettool=$(command -v lockgov)` protocol (unitchecker):
// cmd/lockgov hands the process over to it when IsVetTool says go vet is
// calling (-V=full, -flags, or a trailing unit .cfg file).
//
// The options every analyzer shares (policy file, test files, opt-in
// analyzers) are flags of one analyzer the others require, as the x/tools
// framework carries options; Vet sets them for its run and serialises
// runs, and the vettool exposes them as -policy, -tests and -enable.
//
// # Why in the root module
//
// This package lives in the root module, github.com/lockgov/lockgov,
// because cmd/lockgov imports it: a nested module would need a replace
// directive, and replace directives break `go install
// github.com/lockgov/lockgov/cmd/lockgov@version`. golang.org/x/tools
// enters the root module's requirements but not a service's binary: a
// service that imports instrument or snowflake does not import this
// package, and module graph pruning keeps x/tools out of its build
// (TestLibrariesDoNotImportTools holds that).
//
// # Failure modes
//
// The analyzers are heuristics over one function at a time, and they
// trust what they cannot see: a context that arrives as a parameter may
// have a deadline, a lease passed to another function or returned is
// released there, a SET NX in a function that never releases its key is
// a TryLock wrapper, a constant key in a function without an id parameter
// is a deliberate singleton. They miss what is spread across functions
// (a GET in one method and the DEL in another) and keys built by helper
// functions they cannot follow; a lock key whose text and names carry no
// lock word is missed without a policy. They may report code that is
// correct for reasons outside the function, for example a DEL on a lock
// key in an admin tool that clears stuck locks on purpose.
//
// Vet fails, wrapping ErrInput and naming the pattern or package, when a
// pattern matches no package or a package (or a dependency) does not
// compile: analysing half a program would report nothing and look clean.
// Under go vet a relative -policy path is resolved in each package's
// directory (go vet runs the tool there): give an absolute path.
package analysis
