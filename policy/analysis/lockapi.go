package analysis

import (
	"go/ast"
	"go/types"
	"strings"
)

// Lock libraries, recognised by package path.
const (
	etcdConcurrency     = "go.etcd.io/etcd/client/v3/concurrency"
	etcdConcurrency34   = "go.etcd.io/etcd/clientv3/concurrency"
	etcdClient          = "go.etcd.io/etcd/client/v3"
	etcdClient34        = "go.etcd.io/etcd/clientv3"
	redsyncPkg          = "github.com/go-redsync/redsync/v4"
	bsmRedislock        = "github.com/bsm/redislock"
	lockgovInstrument   = "github.com/lockgov/lockgov/instrument"
	lockgovInstrumentSl = lockgovInstrument + "/"
)

type lockKind int

const (
	lockAcquire lockKind = iota + 1
	lockNew              // a constructor that names the key: concurrency.NewMutex, Redsync.NewMutex
)

// lockOp is a call into a lock API: an acquisition, or the constructor
// that names a mutex's key.
type lockOp struct {
	call *ast.CallExpr
	kind lockKind
	api  string   // for messages: "etcd Mutex.Lock", "lockgov Acquire", "Redis SETNX"
	ctx  ast.Expr // nil when the API takes no context (redsync Mutex.Lock)
	key  ast.Expr // nil when a constructor named it
	recv ast.Expr
	// scoped: the API releases by itself (instrument.Do).
	scoped bool
	// heldIsRecv: what is held is the receiver (a mutex); otherwise it is
	// the call's first result (a lease or lock).
	heldIsRecv bool
	// release is the method that gives the lock back, for messages and
	// fixes, with whether it takes a context.
	release    string
	releaseCtx bool
	redis      *redisOp // for Redis SET NX / SETNX
}

// lockCall recognises a lock API call. Redis SET NX is returned for every
// key; callers decide whether the key is a lock's.
func lockCall(info *types.Info, call *ast.CallExpr) (lockOp, bool) {
	if op, ok := redisCall(info, call); ok {
		if !op.nx || op.cmd != "SET" && op.cmd != "SETNX" || len(op.keys) == 0 {
			return lockOp{}, false
		}
		api := "Redis SETNX"
		if op.cmd == "SET" {
			api = "Redis SET NX"
		}
		return lockOp{call: call, kind: lockAcquire, api: api, ctx: op.ctx, key: op.keys[0], recv: op.recv, redis: &op}, true
	}
	fn := calleeFunc(info, call)
	if fn == nil || fn.Pkg() == nil {
		return lockOp{}, false
	}
	path, name := fn.Pkg().Path(), fn.Name()
	arg := func(i int) ast.Expr {
		if i < len(call.Args) {
			return call.Args[i]
		}
		return nil
	}
	var recv ast.Expr
	if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok {
		recv = sel.X
	}
	recvType := recvTypeName(fn)
	op := lockOp{call: call, recv: recv}
	switch {
	case path == etcdConcurrency || path == etcdConcurrency34:
		switch {
		case recvType == "" && name == "NewMutex":
			op.kind, op.api, op.key = lockNew, "etcd concurrency.NewMutex", arg(1)
		case recvType == "Mutex" && (name == "Lock" || name == "TryLock"):
			op.kind, op.api, op.ctx = lockAcquire, "etcd Mutex."+name, arg(0)
			op.heldIsRecv, op.release, op.releaseCtx = true, "Unlock", true
		default:
			return lockOp{}, false
		}
	case path == redsyncPkg:
		switch {
		case recvType == "Redsync" && name == "NewMutex":
			op.kind, op.api, op.key = lockNew, "redsync NewMutex", arg(0)
		case recvType == "Mutex" && (name == "Lock" || name == "TryLock"):
			op.kind, op.api = lockAcquire, "redsync Mutex."+name
			op.heldIsRecv, op.release = true, "Unlock"
		case recvType == "Mutex" && (name == "LockContext" || name == "TryLockContext"):
			op.kind, op.api, op.ctx = lockAcquire, "redsync Mutex."+name, arg(0)
			op.heldIsRecv, op.release, op.releaseCtx = true, "UnlockContext", true
		default:
			return lockOp{}, false
		}
	case path == bsmRedislock && name == "Obtain":
		op.kind, op.api, op.ctx = lockAcquire, "redislock Obtain", arg(0)
		op.key = arg(1)
		if recvType == "" {
			op.key = arg(2)
		}
		op.release, op.releaseCtx = "Release", true
	case path == lockgovInstrument || strings.HasPrefix(path, lockgovInstrumentSl):
		switch {
		case name == "Acquire" && (recvType != "" || isInterfaceMethod(fn)):
			op.kind, op.api, op.ctx, op.key = lockAcquire, "lockgov Acquire", arg(0), arg(1)
			op.release, op.releaseCtx = "Release", true
		case name == "Do" && recvType == "" && !isInterfaceMethod(fn) && path == lockgovInstrument:
			op.kind, op.api, op.ctx, op.key, op.scoped = lockAcquire, "instrument.Do", arg(0), arg(2), true
		default:
			return lockOp{}, false
		}
	default:
		return lockOp{}, false
	}
	return op, true
}

// releaseNames are the methods that give a held lock back.
var releaseNames = map[string]bool{"Release": true, "Unlock": true, "UnlockContext": true}
