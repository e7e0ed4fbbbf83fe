package analysis

import (
	"fmt"

	"golang.org/x/tools/go/analysis"
)

// NoDeadline finds lock acquisitions that can wait forever.
var NoDeadline = &analysis.Analyzer{
	Name: "nodeadline",
	Doc: `nodeadline: a lock acquisition whose context has no deadline

Covers go-redis SETNX / SET NX on a lock key, etcd concurrency Mutex.Lock
and TryLock, redsync Mutex.Lock / LockContext / TryLockContext, bsm/redislock
Obtain, and lockgov's Locker.Acquire and instrument.Do. Reported when the
context is context.Background() or TODO(), is derived from one in the same
function without context.WithTimeout or WithDeadline, or went through
context.WithoutCancel; redsync's Mutex.Lock takes no context at all. A
context that arrives as a parameter or from another call is trusted.
The spec's first must: "任何 Lock() 调用必须绑定明确 context.WithTimeout()".
lockgov's governed Locker refuses such calls in enforce mode (ErrPolicy).
Breaks the timeout rule.`,
	Requires: requires,
	Run:      runNoDeadline,
}

func runNoDeadline(pass *analysis.Pass) (any, error) {
	cfg := configOf(pass)
	info := pass.TypesInfo
	for cur, call := range calls(pass) {
		op, ok := lockCall(info, call)
		if !ok || op.kind != lockAcquire {
			continue
		}
		scope, _ := outermostFunc(cur)
		if op.redis != nil && !cfg.isLockKey(keyOf(info, scope, op.key), funcName(cur)) {
			continue
		}
		if op.ctx == nil {
			if op.api == "redsync Mutex.Lock" {
				report(pass, call, ruleTimeout, "redsync Mutex.Lock takes no context: its wait is bounded by the mutex's tries, not by the caller's deadline; use LockContext with a context.WithTimeout")
			}
			continue
		}
		origin, ok := noDeadline(info, scope, op.ctx)
		if !ok {
			continue
		}
		msg := fmt.Sprintf("%s with a context that has no deadline (%s): nothing bounds how long it waits for the store, or for the holder to let go; derive the context with context.WithTimeout", op.api, origin)
		if op.api == "lockgov Acquire" || op.api == "instrument.Do" {
			msg += " (a governed Locker refuses it in enforce mode)"
		}
		report(pass, call, ruleTimeout, msg)
	}
	return nil, nil
}
