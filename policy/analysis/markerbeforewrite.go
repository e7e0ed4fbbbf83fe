package analysis

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"slices"

	"golang.org/x/tools/go/analysis"
)

// MarkerBeforeWrite finds an idempotency marker that outlives a failed
// write.
var MarkerBeforeWrite = &analysis.Analyzer{
	Name: "markerbeforewrite",
	Doc: `markerbeforewrite: an idempotency marker set before the write it guards, not removed on the write's error path

The spec's 4.1 root cause: "Redis 写入成功但 DB 写入失败时，缓存已标记为已处理，
下次请求将跳过实际业务逻辑". With the marker in place and the write failed,
the client's retry is answered "duplicate" and the write never happens.
A marker is a SET, SETEX or SETNX on a key that is not a lock key and either
names itself one (idem, idempotent, dedup, processed, marker) or was read
with GET/EXISTS earlier in the function (check, then mark). Reported when,
after the marker, an "if err != nil" on the result of another call returns
without touching the marker key. The suggested fix deletes the marker at
the start of that error path; setting the marker only after the write
succeeds (or instrument/idempotency) also fixes it.
Breaks the idempotency rule.`,
	Requires: requires,
	Run:      runMarkerBeforeWrite,
}

var markerWords = []string{"idem", "idempotent", "idempotency", "idempotence", "dedup", "dedupe", "deduplication", "processed", "marker"}

func runMarkerBeforeWrite(pass *analysis.Pass) (any, error) {
	conf := configOf(pass)
	info := pass.TypesInfo
	for cur, call := range calls(pass) {
		set, ok := redisCall(info, call)
		if !ok || set.queued || len(set.keys) == 0 || set.cmd != "SET" && set.cmd != "SETEX" && set.cmd != "SETNX" {
			continue
		}
		fn, _, ok := enclosingFunc(cur)
		if !ok {
			continue
		}
		scope, _ := outermostFunc(cur)
		key := keyOf(info, scope, set.keys[0])
		if conf.isLockKey(key, funcName(cur)) || !isMarkerKey(key) && !checkedBefore(info, fn.body, set) {
			continue
		}
		stmt, _, ok := stmtOf(cur)
		if !ok {
			continue
		}
		errIf, write := errorPathAfter(info, fn.body, set, stmt)
		if errIf == nil {
			continue
		}
		report(pass, call, ruleIdempotency, fmt.Sprintf(
			"idempotency marker %s is set before the write it guards (line %d); when that write fails, the return at line %d leaves the marker in place: the retry finds it and skips the write, so the request is lost; set the marker after the write succeeds, or delete it on the error path",
			describeKey(pass, key), lineOf(pass.Fset, write.Pos()), lineOf(pass.Fset, firstReturn(errIf.Body).Pos())),
			markerFix(pass, set, errIf)...)
	}
	return nil, nil
}

func isMarkerKey(k keyExpr) bool {
	texts := k.consts
	if len(texts) == 0 {
		texts = k.names
	}
	for _, t := range texts {
		for _, w := range words(t) {
			if slices.Contains(markerWords, w) {
				return true
			}
		}
	}
	return false
}

// checkedBefore reports whether body reads the marker's key (GET, EXISTS)
// before setting it.
func checkedBefore(info *types.Info, body *ast.BlockStmt, set redisOp) bool {
	for _, op := range redisOps(info, body) {
		if (op.cmd == "GET" || op.cmd == "EXISTS") && op.call.Pos() < set.call.Pos() && op.usesKey(info, set.keys[0]) {
			return true
		}
	}
	return false
}

// errorPathAfter returns the first "if err != nil { ... return }" after the
// marker statement whose err comes from another call made after the marker
// (the write), and whose body leaves the marker alone.
func errorPathAfter(info *types.Info, body *ast.BlockStmt, set redisOp, marker ast.Stmt) (*ast.IfStmt, ast.Node) {
	var found *ast.IfStmt
	var write ast.Node
	walkShallow(body, func(n ast.Node) bool {
		ifs, ok := n.(*ast.IfStmt)
		if found != nil || !ok || ifs.Pos() < marker.End() {
			return found == nil
		}
		errObj := errCheck(info, ifs.Cond)
		if errObj == nil || !returns(ifs.Body) || touchesKey(info, ifs.Body, set.keys[0]) {
			return true
		}
		src := lastAssignment(info, body, errObj, ifs)
		if src == nil || src.Pos() < marker.End() || contains(src, set.call) {
			return true
		}
		found, write = ifs, src
		return false
	})
	return found, write
}

// errCheck returns err for a condition err != nil on an error variable.
func errCheck(info *types.Info, cond ast.Expr) types.Object {
	b, ok := ast.Unparen(cond).(*ast.BinaryExpr)
	if !ok || b.Op != token.NEQ {
		return nil
	}
	x, y := b.X, b.Y
	if isNil(info, x) {
		x, y = y, x
	}
	id := identOf(x)
	if id == nil || !isNil(info, y) || !types.Identical(info.TypeOf(id), types.Universe.Lookup("error").Type()) {
		return nil
	}
	return info.ObjectOf(id)
}

// lastAssignment returns the assignment to obj closest before ifs that
// assigns it from a call: in ifs.Init, or before it in body.
func lastAssignment(info *types.Info, body *ast.BlockStmt, obj types.Object, ifs *ast.IfStmt) ast.Node {
	if ifs.Init != nil && assigns(info, ifs.Init, obj) {
		return ifs.Init
	}
	var last ast.Node
	walkShallow(body, func(n ast.Node) bool {
		if n.Pos() >= ifs.Pos() {
			return false
		}
		if as, ok := n.(*ast.AssignStmt); ok && assigns(info, as, obj) {
			last = as
		}
		return true
	})
	if as, ok := last.(*ast.AssignStmt); ok {
		for _, r := range as.Rhs {
			if _, isCall := ast.Unparen(r).(*ast.CallExpr); isCall {
				return as
			}
		}
	}
	return nil
}

func returns(b *ast.BlockStmt) bool { return firstReturn(b) != nil }

func firstReturn(b *ast.BlockStmt) *ast.ReturnStmt {
	var found *ast.ReturnStmt
	walkShallow(b, func(n ast.Node) bool {
		if r, ok := n.(*ast.ReturnStmt); ok && found == nil {
			found = r
		}
		return found == nil
	})
	return found
}

// touchesKey reports whether n uses key in a call.
func touchesKey(info *types.Info, n ast.Node, key ast.Expr) bool {
	found := false
	walkShallow(n, func(m ast.Node) bool {
		if call, ok := m.(*ast.CallExpr); ok {
			for _, a := range call.Args {
				if sameExpr(info, a, key) {
					found = true
				}
			}
			if op, ok := redisCall(info, call); ok && op.usesKey(info, key) {
				found = true
			}
		}
		return !found
	})
	return found
}

// markerFix deletes the marker at the start of the error path.
func markerFix(pass *analysis.Pass, set redisOp, errIf *ast.IfStmt) []analysis.SuggestedFix {
	if len(errIf.Body.List) == 0 || set.ctx == nil {
		return nil
	}
	pos := errIf.Body.List[0].Pos()
	for _, e := range []ast.Expr{set.recv, set.ctx, set.keys[0]} {
		if !validAt(pass, e, pos) {
			return nil
		}
	}
	text := fmt.Sprintf("%s.Del(%s, %s)\n%s", render(pass.Fset, set.recv), render(pass.Fset, set.ctx), render(pass.Fset, set.keys[0]),
		indentOf(pass.Fset, fileSource(pass, pos), errIf.Body.List[0]))
	return []analysis.SuggestedFix{{
		Message:   "delete the marker when the write fails",
		TextEdits: []analysis.TextEdit{{Pos: pos, End: pos, NewText: []byte(text)}},
	}}
}
