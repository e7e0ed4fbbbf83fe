package analysis

import (
	"fmt"
	"go/ast"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ast/inspector"
)

// SetNXExpire finds a key set without a TTL and given one by a second
// command.
var SetNXExpire = &analysis.Analyzer{
	Name: "setnxexpire",
	Doc: `setnxexpire: SETNX (or SET without EX/PX) followed by a separate EXPIRE on the same key

Two commands are not atomic: a crash, a deploy or a dropped connection
between them leaves the key without a TTL, a lock nobody will ever release
(the spec's "SETNX + EXPIRE ... 中间宕机就会产生永不过期的锁"). Take the lock
with one SET key value NX PX ttl; in go-redis, SetNX with an expiration.
The suggested fix moves the EXPIRE's duration into the SetNX call and drops
the EXPIRE. Commands queued in a pipeline or MULTI transaction are not
reported. Breaks the fallback release rule: the TTL is the last net.`,
	Requires: requires,
	Run:      runSetNXExpire,
}

func runSetNXExpire(pass *analysis.Pass) (any, error) {
	cfg := configOf(pass)
	info := pass.TypesInfo
	for cur, call := range calls(pass) {
		set, ok := redisCall(info, call)
		if !ok || set.queued || set.hasTTL || len(set.keys) == 0 {
			continue
		}
		fn, fnCur, ok := enclosingFunc(cur)
		if !ok {
			continue
		}
		scope, _ := outermostFunc(cur)
		key := keyOf(info, scope, set.keys[0])
		switch {
		case set.cmd == "SETNX", set.cmd == "SET" && set.nx:
		case set.cmd == "SET" && cfg.isLockKey(key, funcName(cur)):
		default:
			continue
		}
		for _, exp := range redisOps(info, fn.body) {
			if !exp.isExpire() || exp.queued || exp.call.Pos() <= call.Pos() || !exp.usesKey(info, set.keys[0]) {
				continue
			}
			first := set.cmd
			if set.cmd == "SET" && set.nx {
				first = "SET NX"
			}
			msg := fmt.Sprintf("%s then %s on %s (line %d) are two commands: a crash or a lost connection between them leaves the key without a TTL, a lock nobody ever releases; set value and TTL in one SET NX PX (SetNX with an expiration)",
				first, exp.cmd, describeKey(pass, key), lineOf(pass.Fset, exp.call.Pos()))
			report(pass, call, ruleFallbackRelease, msg, setNXExpireFix(pass, fnCur, set, exp)...)
			break
		}
	}
	return nil, nil
}

// setNXExpireFix moves the EXPIRE's duration into the SetNX/Set call and
// removes the EXPIRE when it is a statement of its own. Only for go-redis
// methods that take an expiration, and a duration that means the same at
// the SET.
func setNXExpireFix(pass *analysis.Pass, fnCur inspector.Cursor, set, exp redisOp) []analysis.SuggestedFix {
	if set.method != "SetNX" && set.method != "Set" || exp.method != "Expire" && exp.method != "PExpire" ||
		set.ttl == nil || exp.ttl == nil || !validAt(pass, exp.ttl, set.call.Pos()) {
		return nil
	}
	edits := []analysis.TextEdit{{Pos: set.ttl.Pos(), End: set.ttl.End(), NewText: []byte(render(pass.Fset, exp.ttl))}}
	if c, ok := fnCur.FindNode(exp.call); ok {
		stmt, _, ok := stmtOf(c)
		if es, isExpr := stmt.(*ast.ExprStmt); ok && isExpr && ast.Unparen(es.X) == exp.call {
			edits = append(edits, deleteLines(pass.Fset, stmt))
		}
	}
	return []analysis.SuggestedFix{{
		Message:   "set the TTL in the same command and drop the " + exp.cmd,
		TextEdits: edits,
	}}
}
