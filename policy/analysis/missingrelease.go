package analysis

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ast/edge"
	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/cfg"
)

// MissingRelease finds locks that some path does not release.
var MissingRelease = &analysis.Analyzer{
	Name: "missingrelease",
	Doc: `missingrelease: an acquired lease or mutex not released on every path

Follows the function's control flow from the acquisition (lockgov Acquire,
bsm/redislock Obtain, etcd and redsync Mutex.Lock, and a Redis SET NX on a
lock key that the same function releases) to every return, taking the
acquisition's error and ok results into account (the path where it failed
holds nothing). Reported when the result is discarded, when the function
never releases it and does not hand it on (return it, store it, pass it to
another function or a goroutine), when a return is reached with it held,
and when every path releases it but not with defer, so that a panic leaves
it held. The suggested fix for "never released" is a defer of the release
right after the acquisition's error check; instrument.Do does all of this.
Breaks the fallback release rule.`,
	Requires: requires,
	Run:      runMissingRelease,
}

func runMissingRelease(pass *analysis.Pass) (any, error) {
	conf := configOf(pass)
	info := pass.TypesInfo
	for cur, call := range calls(pass) {
		op, ok := lockCall(info, call)
		if !ok || op.kind != lockAcquire || op.scoped {
			continue
		}
		fn, fnCur, ok := enclosingFunc(cur)
		if !ok {
			continue
		}
		res := resultsOf(info, cur)
		h := &heldLock{info: info, call: call, res: res}
		switch {
		case op.redis != nil:
			scope, _ := outermostFunc(cur)
			key := keyOf(info, scope, op.key)
			if !conf.isLockKey(key, funcName(cur)) {
				continue
			}
			h.key, h.name = op.key, "the lock on "+describeKey(pass, key)
			if !h.releasedIn(fn.body) {
				continue // a TryLock wrapper: the caller releases
			}
		case op.heldIsRecv:
			id := identOf(op.recv)
			if id == nil || !isLocal(info.ObjectOf(id), fn.node) {
				continue // a mutex kept in a struct: released by another method
			}
			h.obj, h.name = info.ObjectOf(id), id.Name
		default:
			if res.discarded {
				report(pass, call, ruleFallbackRelease, fmt.Sprintf("the lock %s returns is discarded: it can never be released and stays held until its TTL runs out; keep it and defer its %s, or use instrument.Do", op.api, op.release))
				continue
			}
			if res.value == nil || !isLocal(res.value, fn.node) {
				continue
			}
			h.obj, h.name = res.value, res.value.Name()
		}
		if h.obj != nil && escapes(info, fnCur, h.obj) {
			continue
		}
		if !h.releasedIn(fn.body) {
			report(pass, call, ruleFallbackRelease, fmt.Sprintf("%s: %s is never released in this function and not handed on: it stays held until its TTL runs out; defer its %s right after the acquisition succeeds, or use instrument.Do",
				op.api, h.name, op.release), neverReleasedFix(pass, cur, op, h)...)
			continue
		}
		leak, deferred := h.walk(fn.body)
		switch {
		case leak.IsValid():
			report(pass, call, ruleFallbackRelease, fmt.Sprintf("%s: %s is still held at the return at line %d (it is released on other paths); defer the release right after the acquisition succeeds, or use instrument.Do",
				op.api, h.name, lineOf(pass.Fset, leak)))
		case !deferred:
			report(pass, call, ruleFallbackRelease, fmt.Sprintf("%s: %s is released, but not by defer: a panic between the acquisition and the release leaves it held until its TTL runs out; defer the release, or use instrument.Do",
				op.api, h.name))
		}
	}
	return nil, nil
}

// results are the variables an acquisition's results go to.
type results struct {
	value     types.Object // the lease or lock
	err       types.Object
	ok        types.Object // go-redis SetNX(...).Result() / Val()
	discarded bool         // the lease or lock went to _
}

// resultsOf reads `lease, err := l.Acquire(...)`, `ok, err :=
// rdb.SetNX(...).Result()`, `err := m.Lock(ctx)` and the like.
func resultsOf(info *types.Info, cur inspector.Cursor) results {
	call := cur.Node().(*ast.CallExpr)
	var rhs ast.Node = call
	mode := ""
	c := cur.Parent()
	if sel, ok := c.Node().(*ast.SelectorExpr); ok && sel.X == call {
		if outer, ok := c.Parent().Node().(*ast.CallExpr); ok && outer.Fun == sel {
			mode, rhs, c = sel.Sel.Name, outer, c.Parent().Parent()
		}
	}
	var lhs []ast.Expr
	switch p := c.Node().(type) {
	case *ast.AssignStmt:
		if len(p.Rhs) == 1 && p.Rhs[0] == rhs {
			lhs = p.Lhs
		}
	case *ast.ValueSpec:
		if len(p.Values) == 1 && p.Values[0] == rhs {
			for _, n := range p.Names {
				lhs = append(lhs, n)
			}
		}
	}
	obj := func(i int) types.Object {
		if i < len(lhs) {
			if id := identOf(lhs[i]); id != nil && id.Name != "_" {
				return info.ObjectOf(id)
			}
		}
		return nil
	}
	var r results
	switch mode {
	case "Result":
		r.ok, r.err = obj(0), obj(1)
	case "Val":
		r.ok = obj(0)
	case "Err":
		r.err = obj(0)
	case "":
		sig, _ := info.TypeOf(call.Fun).(*types.Signature)
		if sig == nil {
			break
		}
		switch sig.Results().Len() {
		case 1:
			r.err = obj(0)
		case 2:
			r.value, r.err = obj(0), obj(1)
			if id := identOf(firstOr(lhs)); id != nil && id.Name == "_" {
				r.discarded = true
			}
		}
	}
	return r
}

func firstOr(es []ast.Expr) ast.Expr {
	if len(es) > 0 {
		return es[0]
	}
	return nil
}

// heldLock is what an acquisition holds: a variable (lease, mutex) or, for
// Redis SET NX, a key.
type heldLock struct {
	info *types.Info
	call *ast.CallExpr
	res  results
	obj  types.Object
	key  ast.Expr
	name string
}

// isRelease reports whether call gives the lock back.
func (h *heldLock) isRelease(call *ast.CallExpr) bool {
	if h.obj != nil {
		sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
		return ok && releaseNames[sel.Sel.Name] && identOf(sel.X) != nil && h.info.ObjectOf(identOf(sel.X)) == h.obj
	}
	if op, ok := redisCall(h.info, call); ok {
		return (op.cmd == "DEL" || op.cmd == "UNLINK" || op.cmd == "EVAL") && op.usesKey(h.info, h.key)
	}
	if fn := calleeFunc(h.info, call); fn != nil && hasReleaseWord(fn.Name()) {
		for _, a := range call.Args {
			if sameExpr(h.info, a, h.key) {
				return true
			}
		}
	}
	return false
}

func hasReleaseWord(name string) bool {
	for _, w := range words(name) {
		if w == "unlock" || w == "release" {
			return true
		}
	}
	return false
}

// releasedBy reports whether node n releases the lock; function literals
// count only in a defer.
func (h *heldLock) releasedBy(n ast.Node) bool {
	_, isDefer := n.(*ast.DeferStmt)
	found := false
	ast.Inspect(n, func(m ast.Node) bool {
		if found {
			return false
		}
		switch m := m.(type) {
		case *ast.FuncLit:
			return isDefer
		case *ast.CallExpr:
			if m != h.call && h.isRelease(m) {
				found = true
			}
		}
		return true
	})
	return found
}

// releasedIn reports whether anything in body releases the lock.
func (h *heldLock) releasedIn(body *ast.BlockStmt) bool {
	released := false
	ast.Inspect(body, func(n ast.Node) bool {
		if s, ok := n.(ast.Stmt); ok && !released {
			if _, isBlock := s.(*ast.BlockStmt); !isBlock {
				released = h.releasedBy(s)
			}
		}
		return !released
	})
	return released
}

// walk follows the control flow from the acquisition. leak is the first
// return reached with the lock held; deferred reports whether every path
// that releases it does so with a defer.
func (h *heldLock) walk(body *ast.BlockStmt) (leak token.Pos, deferred bool) {
	g := cfg.New(body, mayReturn(h.info))
	type state struct {
		b            *cfg.Block
		errLive, okL bool
	}
	seen := map[state]bool{}
	deferred = true
	var visit func(b *cfg.Block, start int, errLive, okLive bool)
	visit = func(b *cfg.Block, start int, errLive, okLive bool) {
		for i := start; i < len(b.Nodes); i++ {
			n := b.Nodes[i]
			if !contains(n, h.call) {
				if h.releasedBy(n) {
					if _, ok := n.(*ast.DeferStmt); !ok {
						deferred = false
					}
					return
				}
				errLive = errLive && !assigns(h.info, n, h.res.err)
				okLive = okLive && !assigns(h.info, n, h.res.ok)
			}
		}
		if len(b.Succs) == 0 {
			if len(b.Nodes) > 0 && !leak.IsValid() {
				if r, ok := b.Nodes[len(b.Nodes)-1].(*ast.ReturnStmt); ok {
					leak = r.Pos()
				}
			}
			return
		}
		succs := b.Succs
		if len(succs) == 2 && len(b.Nodes) > 0 {
			if cond, ok := b.Nodes[len(b.Nodes)-1].(ast.Expr); ok {
				c := condEval{h: h, errLive: errLive, okLive: okLive}
				switch {
				case c.notHeldIf(cond, true):
					succs = succs[1:]
				case c.notHeldIf(cond, false):
					succs = succs[:1]
				}
			}
		}
		for _, s := range succs {
			st := state{s, errLive, okLive}
			if !seen[st] {
				seen[st] = true
				visit(s, 0, errLive, okLive)
			}
		}
	}
	for _, b := range g.Blocks {
		for i, n := range b.Nodes {
			if contains(n, h.call) {
				visit(b, i, h.res.err != nil, h.res.ok != nil)
				return leak, deferred
			}
		}
	}
	return token.NoPos, true
}

func contains(n ast.Node, m ast.Node) bool {
	return n.Pos() <= m.Pos() && m.End() <= n.End()
}

// assigns reports whether n assigns to obj.
func assigns(info *types.Info, n ast.Node, obj types.Object) bool {
	if obj == nil {
		return false
	}
	as, ok := n.(*ast.AssignStmt)
	if !ok {
		return false
	}
	for _, l := range as.Lhs {
		if id := identOf(l); id != nil && info.ObjectOf(id) == obj {
			return true
		}
	}
	return false
}

// condEval decides whether a branch condition being true (or false) means
// the acquisition failed: err != nil, !ok, and their combinations.
type condEval struct {
	h               *heldLock
	errLive, okLive bool
}

func (c condEval) isErr(e ast.Expr) bool {
	e = ast.Unparen(e)
	if id := identOf(e); id != nil {
		return c.errLive && c.h.res.err != nil && c.h.info.ObjectOf(id) == c.h.res.err
	}
	return c.mentionsCall(e) && types.Identical(c.h.info.TypeOf(e), types.Universe.Lookup("error").Type())
}

func (c condEval) isOK(e ast.Expr) bool {
	e = ast.Unparen(e)
	if id := identOf(e); id != nil {
		return c.okLive && c.h.res.ok != nil && c.h.info.ObjectOf(id) == c.h.res.ok
	}
	if !c.mentionsCall(e) {
		return false
	}
	b, ok := c.h.info.TypeOf(e).Underlying().(*types.Basic)
	return ok && b.Kind() == types.Bool
}

func (c condEval) mentionsCall(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		found = found || n == c.h.call
		return !found
	})
	return found
}

func isNil(info *types.Info, e ast.Expr) bool {
	return info.Types[e].IsNil()
}

// notHeldIf reports whether cond evaluating to v implies that the lock was
// not acquired.
func (c condEval) notHeldIf(cond ast.Expr, v bool) bool {
	info := c.h.info
	switch e := ast.Unparen(cond).(type) {
	case *ast.UnaryExpr:
		if e.Op == token.NOT {
			return c.notHeldIf(e.X, !v)
		}
	case *ast.BinaryExpr:
		switch e.Op {
		case token.NEQ, token.EQL:
			errSide := c.isErr(e.X) && isNil(info, e.Y) || c.isErr(e.Y) && isNil(info, e.X)
			// err != nil true, or err == nil false.
			return errSide && (e.Op == token.NEQ) == v
		case token.LOR:
			if v {
				return c.notHeldIf(e.X, true) && c.notHeldIf(e.Y, true)
			}
			return c.notHeldIf(e.X, false) || c.notHeldIf(e.Y, false)
		case token.LAND:
			if v {
				return c.notHeldIf(e.X, true) || c.notHeldIf(e.Y, true)
			}
			return c.notHeldIf(e.X, false) && c.notHeldIf(e.Y, false)
		}
	case *ast.CallExpr:
		if fn := calleeFunc(info, e); v && isPkgFunc(fn, "errors", "Is", "As") && len(e.Args) > 0 && c.isErr(e.Args[0]) {
			return true
		}
	}
	return !v && c.isOK(cond)
}

// mayReturn tells the CFG builder which calls never return: a path that
// ends in panic, os.Exit or log.Fatal is not a return with the lock held.
func mayReturn(info *types.Info) func(*ast.CallExpr) bool {
	return func(call *ast.CallExpr) bool {
		if id, ok := ast.Unparen(call.Fun).(*ast.Ident); ok {
			if _, builtin := info.Uses[id].(*types.Builtin); builtin && id.Name == "panic" {
				return false
			}
		}
		fn := calleeFunc(info, call)
		if isPkgFunc(fn, "os", "Exit") || isPkgFunc(fn, "log", "Fatal", "Fatalf", "Fatalln", "Panic", "Panicf", "Panicln") {
			return false
		}
		if fn != nil && fn.Pkg() != nil && (fn.Pkg().Path() == "log" || fn.Pkg().Path() == "testing") {
			switch fn.Name() {
			case "Fatal", "Fatalf", "Fatalln", "Panic", "Panicf", "Panicln", "FailNow", "SkipNow", "Skip", "Skipf":
				return false
			}
		}
		return true
	}
}

// escapes reports whether obj leaves the function's control: returned
// (itself, or what one of its methods says about it), stored, passed to a
// function, or used in a function literal other than a deferred one.
// Method calls on it and comparisons with nil stay inside.
func escapes(info *types.Info, fnCur inspector.Cursor, obj types.Object) bool {
	for c := range fnCur.Preorder((*ast.Ident)(nil)) {
		id := c.Node().(*ast.Ident)
		if info.Uses[id] != obj {
			continue
		}
		if inNonDeferLit(c, fnCur) {
			return true
		}
		switch p := c.Parent().Node().(type) {
		case *ast.SelectorExpr:
			call, ok := c.Parent().Parent().Node().(*ast.CallExpr)
			if !ok || call.Fun != p {
				return true
			}
			// Returning what a method says about it (m.Key(), the key an
			// etcd lock service hands its client) hands it on too.
			if !releaseNames[p.Sel.Name] && inReturn(c) {
				return true
			}
		case *ast.BinaryExpr:
			if isNil(info, p.X) || isNil(info, p.Y) {
				continue
			}
			return true
		case *ast.AssignStmt:
			if c.ParentEdgeKind() == edge.AssignStmt_Lhs {
				continue
			}
			return true
		default:
			return true
		}
	}
	return false
}

// inReturn reports whether c is in a return statement of its function.
func inReturn(c inspector.Cursor) bool {
	for p := range c.Enclosing((*ast.ReturnStmt)(nil), (*ast.FuncLit)(nil), (*ast.FuncDecl)(nil)) {
		_, ok := p.Node().(*ast.ReturnStmt)
		return ok
	}
	return false
}

func inNonDeferLit(c, fnCur inspector.Cursor) bool {
	for l := range c.Enclosing((*ast.FuncLit)(nil)) {
		if l == fnCur {
			return false
		}
		if call, ok := l.Parent().Node().(*ast.CallExpr); ok && call.Fun == l.Node() {
			if _, ok := l.Parent().Parent().Node().(*ast.DeferStmt); ok {
				continue
			}
		}
		return true
	}
	return false
}

// neverReleasedFix inserts a deferred release after the acquisition, or
// after the error check that follows it.
func neverReleasedFix(pass *analysis.Pass, cur inspector.Cursor, op lockOp, h *heldLock) []analysis.SuggestedFix {
	if h.obj == nil || op.releaseCtx && op.ctx == nil {
		return nil
	}
	stmt, sc, ok := stmtOf(cur)
	if !ok {
		return nil
	}
	if ifs, isIf := sc.Parent().Node().(*ast.IfStmt); isIf && ifs.Init == stmt {
		stmt, sc = ifs, sc.Parent()
	} else if next, ok := sc.NextSibling(); ok {
		if ifs, isIf := next.Node().(*ast.IfStmt); isIf && ifs.Init == nil &&
			(condEval{h: h, errLive: true, okLive: true}).notHeldIf(ifs.Cond, true) {
			stmt = ifs
		}
	}
	switch sc.Parent().Node().(type) {
	case *ast.BlockStmt, *ast.CaseClause, *ast.CommClause:
	default:
		return nil
	}
	args := ""
	if op.releaseCtx {
		args = render(pass.Fset, op.ctx)
	}
	text := fmt.Sprintf("\n%sdefer %s.%s(%s)", indentOf(pass.Fset, fileSource(pass, stmt.Pos()), stmt), h.name, op.release, args)
	return []analysis.SuggestedFix{{
		Message:   "defer the release right after the acquisition",
		TextEdits: []analysis.TextEdit{{Pos: stmt.End(), End: stmt.End(), NewText: []byte(text)}},
	}}
}
