package analysis

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ast/inspector"
)

// UnsafeUnlock finds a lock released with a plain DEL.
var UnsafeUnlock = &analysis.Analyzer{
	Name: "unsafeunlock",
	Doc: `unsafeunlock: a lock key deleted with DEL (alone, or after a GET) instead of an owner-checked script

A plain DEL deletes the lock whoever holds it. GET, compare, then DEL is
two commands: between them the lock can expire and pass to another owner,
and the DEL deletes that owner's lock - the spec's incident "A 删了 B 的锁".
Release with one compare-and-delete script (redis.call("GET") == token then
DEL), or lockgov's Lease.Release. The suggested fix replaces the DEL with
that script when the owner token is known (the value the GET is compared
with, or the value a SET NX on the same key stored). A DEL inside a WATCH
transaction is owner-checked by the WATCH and not reported.
Breaks the owner-checked release rule.`,
	Requires: requires,
	Run:      runUnsafeUnlock,
}

// releaseScript is the compare-and-delete the fix puts in place of a DEL.
const releaseScript = "`if redis.call(\"GET\", KEYS[1]) == ARGV[1] then return redis.call(\"DEL\", KEYS[1]) end return 0`"

func runUnsafeUnlock(pass *analysis.Pass) (any, error) {
	cfg := configOf(pass)
	info := pass.TypesInfo
	for cur, call := range calls(pass) {
		del, ok := redisCall(info, call)
		if !ok || del.cmd != "DEL" && del.cmd != "UNLINK" && del.cmd != "GETDEL" || inWatch(info, cur) {
			continue
		}
		scope, _ := outermostFunc(cur)
		fname := funcName(cur)
		for _, k := range del.keys {
			key := keyOf(info, scope, k)
			if !cfg.isLockKey(key, fname) {
				continue
			}
			get := precedingGet(info, scope, del, k)
			var msg string
			if get != nil && del.cmd != "GETDEL" {
				msg = fmt.Sprintf("GET (line %d) then %s on lock key %s: between the two commands the lock can expire and pass to another owner, and this %s deletes that owner's lock (\"A deleted B's lock\"); release with one owner-checked compare-and-delete script, or Lease.Release",
					lineOf(pass.Fset, get.call.Pos()), del.cmd, describeKey(pass, key), del.cmd)
			} else {
				msg = fmt.Sprintf("%s on lock key %s deletes the lock whoever holds it, another owner's too once this one's TTL has run out; release with an owner-checked compare-and-delete script, or Lease.Release",
					del.cmd, describeKey(pass, key))
			}
			report(pass, call, ruleOwnerRelease, msg, unlockFix(pass, cur, scope, del, get)...)
			break
		}
	}
	return nil, nil
}

// inWatch reports whether cur is inside the function a go-redis Watch
// runs: its commands are owner-checked by the WATCH.
func inWatch(info *types.Info, cur inspector.Cursor) bool {
	for c := range cur.Enclosing((*ast.FuncLit)(nil)) {
		if call, ok := c.Parent().Node().(*ast.CallExpr); ok {
			if fn := calleeFunc(info, call); fn != nil && fn.Name() == "Watch" && fn.Pkg() != nil && redisPkgs[fn.Pkg().Path()] {
				return true
			}
		}
	}
	return false
}

// precedingGet returns the GET of key before del in scope.
func precedingGet(info *types.Info, scope ast.Node, del redisOp, key ast.Expr) *redisOp {
	for _, op := range redisOps(info, scope) {
		if op.cmd == "GET" && op.call.Pos() < del.call.Pos() && op.usesKey(info, key) {
			return &op
		}
	}
	return nil
}

// unlockFix replaces a DEL of one key, used as a statement, deferred or
// for its Err(), with the compare-and-delete script, when the owner token is known.
func unlockFix(pass *analysis.Pass, cur inspector.Cursor, scope ast.Node, del redisOp, get *redisOp) []analysis.SuggestedFix {
	if del.method != "Del" && del.method != "Unlink" || len(del.keys) != 1 {
		return nil
	}
	switch p := cur.Parent().Node().(type) {
	case *ast.ExprStmt, *ast.DeferStmt:
	case *ast.SelectorExpr:
		if p.Sel.Name != "Err" {
			return nil
		}
	default:
		return nil
	}
	var owner string
	if get != nil {
		owner = comparedToken(pass, scope, *get, del.call.Pos())
	}
	if owner == "" {
		owner = storedToken(pass, cur, del)
	}
	if owner == "" {
		return nil
	}
	text := fmt.Sprintf("%s.Eval(%s, %s, []string{%s}, %s)", render(pass.Fset, del.recv), render(pass.Fset, del.ctx),
		releaseScript, render(pass.Fset, del.keys[0]), owner)
	return []analysis.SuggestedFix{{
		Message:   "release with an owner-checked compare-and-delete script",
		TextEdits: []analysis.TextEdit{{Pos: del.call.Pos(), End: del.call.End(), NewText: []byte(text)}},
	}}
}

// comparedToken returns what the GET's result is compared with (the owner
// token), if it means the same at pos.
func comparedToken(pass *analysis.Pass, scope ast.Node, get redisOp, pos token.Pos) string {
	info := pass.TypesInfo
	var result types.Object
	ast.Inspect(scope, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Rhs) != 1 || len(as.Lhs) == 0 {
			return true
		}
		if c, ok := ast.Unparen(as.Rhs[0]).(*ast.CallExpr); ok {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && ast.Unparen(sel.X) == get.call && (sel.Sel.Name == "Result" || sel.Sel.Name == "Val") {
				if id := identOf(as.Lhs[0]); id != nil {
					result = info.ObjectOf(id)
				}
			}
		}
		return true
	})
	isResult := func(e ast.Expr) bool {
		if id := identOf(e); id != nil && result != nil && info.ObjectOf(id) == result {
			return true
		}
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			found = found || n == get.call
			return !found
		})
		return found
	}
	var tok string
	ast.Inspect(scope, func(n ast.Node) bool {
		b, ok := n.(*ast.BinaryExpr)
		if !ok || tok != "" || b.Op != token.EQL && b.Op != token.NEQ {
			return tok == ""
		}
		for _, pair := range [][2]ast.Expr{{b.X, b.Y}, {b.Y, b.X}} {
			if isResult(pair[0]) && !isResult(pair[1]) && validAt(pass, pair[1], pos) {
				tok = render(pass.Fset, pair[1])
				return false
			}
		}
		return true
	})
	return tok
}

// storedToken returns the value a SET NX on the same key stored: in the
// same function, or in a method of the same type that keys the lock by the
// same field (Lock sets l.key to l.token; Unlock deletes l.key).
func storedToken(pass *analysis.Pass, cur inspector.Cursor, del redisOp) string {
	info := pass.TypesInfo
	in := cur.Inspector()
	delRecv, delField := receiverField(info, cur, del.keys[0])
	for c := range in.Root().Preorder((*ast.CallExpr)(nil)) {
		set, ok := redisCall(info, c.Node().(*ast.CallExpr))
		if !ok || !set.nx || len(set.keys) == 0 || set.value == nil {
			continue
		}
		if set.usesKey(info, del.keys[0]) && validAt(pass, set.value, del.call.Pos()) {
			return render(pass.Fset, set.value)
		}
		if delRecv == nil {
			continue
		}
		setRecv, setField := receiverField(info, c, set.keys[0])
		if setRecv == nil || setField != delField || !types.Identical(setRecv.Type(), delRecv.Type()) {
			continue
		}
		// The value must be another field of the same receiver: l.token.
		sel, ok := ast.Unparen(set.value).(*ast.SelectorExpr)
		if !ok || info.ObjectOf(identOf(sel.X)) != setRecv {
			continue
		}
		return delRecv.Name() + "." + sel.Sel.Name
	}
	return ""
}

// receiverField returns, for a key written recv.field in a method, the
// method's receiver and the field's name.
func receiverField(info *types.Info, cur inspector.Cursor, key ast.Expr) (*types.Var, string) {
	sel, ok := ast.Unparen(key).(*ast.SelectorExpr)
	if !ok {
		return nil, ""
	}
	for c := range cur.Enclosing((*ast.FuncDecl)(nil)) {
		fd := c.Node().(*ast.FuncDecl)
		if fd.Recv == nil || len(fd.Recv.List) != 1 || len(fd.Recv.List[0].Names) != 1 {
			return nil, ""
		}
		recv, _ := info.Defs[fd.Recv.List[0].Names[0]].(*types.Var)
		if recv == nil || info.ObjectOf(identOf(sel.X)) != recv {
			return nil, ""
		}
		return recv, sel.Sel.Name
	}
	return nil, ""
}
