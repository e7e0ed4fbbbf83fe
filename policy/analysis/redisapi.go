package analysis

import (
	"go/ast"
	"go/types"
	"strings"
)

// redisPkgs are the go-redis packages whose commands the analyzers read,
// recognised by package path so that any client type works: *redis.Client,
// redis.UniversalClient, redis.Cmdable, *redis.ClusterClient, pipelines.
var redisPkgs = map[string]bool{
	"github.com/redis/go-redis/v9": true,
	"github.com/go-redis/redis/v8": true,
}

// redisOp is one Redis command issued through go-redis.
type redisOp struct {
	call   *ast.CallExpr
	method string     // the go-redis method: SetNX, Expire, Do, Run, ...
	cmd    string     // the Redis command: SET, SETNX, SETEX, EXPIRE, PEXPIRE, EXPIREAT, DEL, UNLINK, GET, GETDEL, EXISTS, EVAL
	recv   ast.Expr   // the client, pipeline or script the method is called on
	ctx    ast.Expr   // the context argument
	keys   []ast.Expr // the keys the command names (nil when passed as a slice...)
	value  ast.Expr   // SET's value
	ttl    ast.Expr   // SET's expiration or EXPIRE's duration, when it has one
	hasTTL bool       // a SET that sets an expiry (or keeps one)
	nx     bool       // SET NX / SETNX
	queued bool       // sent in a pipeline or a MULTI/EXEC transaction
}

// redisCall recognises a go-redis command call.
func redisCall(info *types.Info, call *ast.CallExpr) (redisOp, bool) {
	fn := calleeFunc(info, call)
	if fn == nil || fn.Pkg() == nil || !redisPkgs[fn.Pkg().Path()] {
		return redisOp{}, false
	}
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok || recvTypeName(fn) == "" && !isInterfaceMethod(fn) {
		return redisOp{}, false
	}
	args := call.Args
	arg := func(i int) ast.Expr {
		if i < len(args) {
			return args[i]
		}
		return nil
	}
	op := redisOp{call: call, method: fn.Name(), recv: sel.X, ctx: arg(0)}
	keyAt := func(i int) {
		if e := arg(i); e != nil {
			op.keys = []ast.Expr{e}
		}
	}
	switch fn.Name() {
	case "SetNX":
		op.cmd, op.nx = "SETNX", true
		keyAt(1)
		op.value, op.ttl = arg(2), arg(3)
		op.hasTTL = !isZeroConst(info, op.ttl)
	case "Set":
		op.cmd = "SET"
		keyAt(1)
		op.value, op.ttl = arg(2), arg(3)
		op.hasTTL = !isZeroConst(info, op.ttl)
	case "SetEx":
		op.cmd, op.hasTTL = "SETEX", true
		keyAt(1)
		op.value, op.ttl = arg(2), arg(3)
	case "SetArgs":
		op.cmd = "SET"
		keyAt(1)
		op.value = arg(2)
		op.nx, op.hasTTL = setArgs(info, arg(3))
	case "Expire", "ExpireNX", "ExpireXX", "ExpireGT", "ExpireLT":
		op.cmd = "EXPIRE"
		keyAt(1)
		op.ttl = arg(2)
	case "PExpire":
		op.cmd = "PEXPIRE"
		keyAt(1)
		op.ttl = arg(2)
	case "ExpireAt", "PExpireAt":
		op.cmd = "EXPIREAT"
		keyAt(1)
	case "Get", "GetDel", "Exists", "Del", "Unlink":
		op.cmd = strings.ToUpper(fn.Name())
		if call.Ellipsis == 0 {
			op.keys = args[min(1, len(args)):]
		}
	case "Eval", "EvalSha", "EvalRO", "EvalShaRO", "Run", "RunRO":
		op.cmd = "EVAL"
		op.keys = sliceElems(arg(2))
	case "Do":
		if !doCommand(info, &op, args) {
			return redisOp{}, false
		}
	default:
		return redisOp{}, false
	}
	if tv, ok := info.Types[sel.X]; ok && tv.Type != nil {
		switch namedName(tv.Type) {
		case "Pipeliner", "Pipeline", "Tx":
			op.queued = true
		}
	}
	return op, true
}

func isInterfaceMethod(fn *types.Func) bool {
	sig, ok := fn.Type().(*types.Signature)
	return ok && sig.Recv() != nil && types.IsInterface(sig.Recv().Type())
}

// setArgs reads a redis.SetArgs literal: Mode NX, and whether it sets an
// expiry. A SetArgs that is not a literal is trusted to set one.
func setArgs(info *types.Info, e ast.Expr) (nx, hasTTL bool) {
	lit, ok := ast.Unparen(e).(*ast.CompositeLit)
	if !ok {
		return false, true
	}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		switch id := identOf(kv.Key); {
		case id == nil:
		case id.Name == "Mode":
			if s, ok := stringConst(info, kv.Value); ok && strings.EqualFold(s, "NX") {
				nx = true
			}
		case id.Name == "TTL", id.Name == "ExpireAt":
			hasTTL = hasTTL || !isZeroConst(info, kv.Value)
		case id.Name == "KeepTTL":
			hasTTL = true
		}
	}
	return nx, hasTTL
}

// doCommand reads client.Do(ctx, "SET", key, value, "NX", "PX", 30000) and
// the like: the command and key must be there for the analyzers to care.
func doCommand(info *types.Info, op *redisOp, args []ast.Expr) bool {
	if len(args) < 3 {
		return false
	}
	name, ok := stringConst(info, args[1])
	if !ok {
		return false
	}
	op.cmd = strings.ToUpper(name)
	op.keys = []ast.Expr{args[2]}
	switch op.cmd {
	case "SETNX":
		op.nx = true
	case "SET":
		for _, a := range args[3:] {
			s, _ := stringConst(info, a)
			switch strings.ToUpper(s) {
			case "NX":
				op.nx = true
			case "EX", "PX", "EXAT", "PXAT", "KEEPTTL":
				op.hasTTL = true
			}
		}
	case "SETEX", "PSETEX":
		op.cmd, op.hasTTL = "SETEX", true
	case "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT":
		if op.cmd == "PEXPIREAT" {
			op.cmd = "EXPIREAT"
		}
	case "DEL", "UNLINK", "GET", "GETDEL", "EXISTS":
		op.keys = args[2:]
	case "EVAL", "EVALSHA":
		op.cmd, op.keys = "EVAL", nil
	default:
		return false
	}
	if len(args) > 3 {
		op.value = args[3]
	}
	return true
}

func sliceElems(e ast.Expr) []ast.Expr {
	if lit, ok := ast.Unparen(e).(*ast.CompositeLit); ok {
		return lit.Elts
	}
	return nil
}

// redisOps returns the Redis commands under n, outside function literals.
func redisOps(info *types.Info, n ast.Node) []redisOp {
	var ops []redisOp
	walkShallow(n, func(m ast.Node) bool {
		if call, ok := m.(*ast.CallExpr); ok {
			if op, ok := redisCall(info, call); ok {
				ops = append(ops, op)
			}
		}
		return true
	})
	return ops
}

// usesKey reports whether op names key.
func (op redisOp) usesKey(info *types.Info, key ast.Expr) bool {
	for _, k := range op.keys {
		if sameExpr(info, k, key) {
			return true
		}
	}
	return false
}

// isExpire reports whether op sets a TTL on an existing key.
func (op redisOp) isExpire() bool {
	return op.cmd == "EXPIRE" || op.cmd == "PEXPIRE" || op.cmd == "EXPIREAT"
}
