package analysis

import (
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ast/edge"
	"golang.org/x/tools/go/ast/inspector"
)

// UncheckedTxn finds an etcd compare-and-set whose outcome is ignored.
var UncheckedTxn = &analysis.Analyzer{
	Name: "uncheckedtxn",
	Doc: `uncheckedtxn: an etcd create-if-absent Txn (a lock acquisition) whose response's Succeeded is never read

A lock taken with Txn().If(CreateRevision(key) == 0).Then(OpPut(key, ...,
WithLease(id))).Commit() is held only when the comparison held. Commit
returns a nil error either way: the response's Succeeded says which branch
ran. Code that discards the response (the spec's NewEtcdLock checks the
lease grant's response instead) treats a lost race as an acquired lock, and
two processes both believe they hold it. Reported when the response of a
Commit on a Txn whose If compares a key's CreateRevision or Version with 0
goes to _, is not assigned, or is assigned to a variable whose Succeeded
the function never reads and that it does not return or pass on. A Txn
guarded by a known revision is an owner-checked write (delete the key if it
is still ours) whose outcome may not matter, and is not reported.
Breaks the mutual exclusion rule.`,
	Requires: requires,
	Run:      runUncheckedTxn,
}

func runUncheckedTxn(pass *analysis.Pass) (any, error) {
	info := pass.TypesInfo
	for cur, call := range calls(pass) {
		fn := calleeFunc(info, call)
		if fn == nil || fn.Name() != "Commit" || fn.Pkg() == nil || fn.Pkg().Path() != etcdClient && fn.Pkg().Path() != etcdClient34 || !createsIfAbsent(info, call) {
			continue
		}
		resp, checked := txnResponse(info, cur)
		if checked {
			continue
		}
		what := "its response is discarded"
		if resp != nil {
			what = "its response " + resp.Name() + " is never checked for Succeeded"
		}
		report(pass, call, ruleMutualExclusion, "etcd create-if-absent Txn (a lock acquisition): "+what+
			", so a comparison that failed (someone else holds the key) reads as success, and two callers both believe they hold the lock; check resp.Succeeded")
	}
	return nil, nil
}

// createsIfAbsent reports whether the Txn that call commits is a
// create-if-absent, the shape of a lock acquisition: an If comparing a
// key's CreateRevision or Version with 0. A Txn guarded by a known revision
// is an owner-checked write whose outcome may not matter (delete it if it
// is still ours) and is not reported.
func createsIfAbsent(info *types.Info, call *ast.CallExpr) bool {
	for e := ast.Expr(call); ; {
		c, ok := ast.Unparen(e).(*ast.CallExpr)
		if !ok {
			return false
		}
		sel, ok := ast.Unparen(c.Fun).(*ast.SelectorExpr)
		if !ok {
			return false
		}
		if sel.Sel.Name == "If" {
			for _, a := range c.Args {
				if isAbsentCompare(info, a) {
					return true
				}
			}
		}
		e = sel.X
	}
}

// isAbsentCompare matches clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
// and the same with Version.
func isAbsentCompare(info *types.Info, e ast.Expr) bool {
	c, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok || len(c.Args) != 3 || !isEtcdFunc(calleeFunc(info, c), "Compare") {
		return false
	}
	target, ok := ast.Unparen(c.Args[0]).(*ast.CallExpr)
	if !ok || !isEtcdFunc(calleeFunc(info, target), "CreateRevision", "Version") {
		return false
	}
	op, _ := stringConst(info, c.Args[1])
	return op == "=" && isZeroConst(info, c.Args[2])
}

func isEtcdFunc(fn *types.Func, names ...string) bool {
	return isPkgFunc(fn, etcdClient, names...) || isPkgFunc(fn, etcdClient34, names...)
}

// txnResponse returns the variable Commit's response goes to, and whether
// the response is checked (its Succeeded read) or handed on.
func txnResponse(info *types.Info, cur inspector.Cursor) (types.Object, bool) {
	call := cur.Node().(*ast.CallExpr)
	switch p := cur.Parent().Node().(type) {
	case *ast.SelectorExpr:
		return nil, p.Sel.Name == "Succeeded"
	case *ast.AssignStmt:
		if len(p.Rhs) != 1 || p.Rhs[0] != call {
			return nil, true
		}
		id := identOf(p.Lhs[0])
		if id == nil {
			return nil, true // a field or index: handed on
		}
		if id.Name == "_" {
			return nil, false
		}
		obj := info.ObjectOf(id)
		scope, _ := outermostFunc(cur)
		for c := range cur.Inspector().Root().Preorder((*ast.Ident)(nil)) {
			u := c.Node().(*ast.Ident)
			if info.Uses[u] != obj || !contains(scope, u) {
				continue
			}
			if sel, ok := c.Parent().Node().(*ast.SelectorExpr); ok {
				if sel.Sel.Name == "Succeeded" {
					return obj, true
				}
				continue
			}
			switch p := c.Parent().Node().(type) {
			case *ast.AssignStmt:
				if c.ParentEdgeKind() == edge.AssignStmt_Lhs {
					continue
				}
			case *ast.BinaryExpr:
				if isNil(info, p.X) || isNil(info, p.Y) {
					continue
				}
			}
			return obj, true // returned, passed on, compared...
		}
		return obj, false
	case *ast.ExprStmt:
		return nil, false
	case *ast.ValueSpec:
		return nil, true
	}
	return nil, true
}
