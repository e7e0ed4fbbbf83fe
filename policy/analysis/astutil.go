package analysis

import (
	"bytes"
	"go/ast"
	"go/constant"
	"go/printer"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/types/typeutil"
)

// calleeFunc returns the function or method call calls, or nil (a call of a
// func value, a conversion, a builtin).
func calleeFunc(info *types.Info, call *ast.CallExpr) *types.Func {
	fn, _ := typeutil.Callee(info, call).(*types.Func)
	return fn
}

// isPkgFunc reports whether fn is the package-level function path.name.
func isPkgFunc(fn *types.Func, path string, names ...string) bool {
	if fn == nil || fn.Pkg() == nil || fn.Pkg().Path() != path {
		return false
	}
	if sig, ok := fn.Type().(*types.Signature); !ok || sig.Recv() != nil {
		return false
	}
	for _, n := range names {
		if fn.Name() == n {
			return true
		}
	}
	return false
}

// recvTypeName returns the name of the named type of fn's receiver (after
// pointers), or "" for functions and methods of unnamed types.
func recvTypeName(fn *types.Func) string {
	sig, ok := fn.Type().(*types.Signature)
	if !ok || sig.Recv() == nil {
		return ""
	}
	return namedName(sig.Recv().Type())
}

// namedName returns the name of t's named type, after pointers.
func namedName(t types.Type) string {
	if p, ok := t.Underlying().(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}

// stringConst returns e's value when it is a constant string.
func stringConst(info *types.Info, e ast.Expr) (string, bool) {
	if e == nil {
		return "", false
	}
	tv, ok := info.Types[e]
	if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
		return "", false
	}
	return constant.StringVal(tv.Value), true
}

// isZeroConst reports whether e is the constant 0 (a TTL of zero: none).
func isZeroConst(info *types.Info, e ast.Expr) bool {
	if e == nil {
		return false
	}
	tv, ok := info.Types[e]
	if !ok || tv.Value == nil {
		return false
	}
	v := constant.ToInt(tv.Value)
	return v.Kind() == constant.Int && constant.Sign(v) == 0
}

// sameExpr reports whether a and b denote the same value in the sense a
// reader would take them: the same variables, fields, constants and calls.
// Side effects are ignored (rdb.Get(k) twice is "the same").
func sameExpr(info *types.Info, a, b ast.Expr) bool {
	a, b = ast.Unparen(a), ast.Unparen(b)
	if a == nil || b == nil {
		return false
	}
	if va, ok := info.Types[a]; ok && va.Value != nil {
		vb, ok := info.Types[b]
		return ok && vb.Value != nil && constant.Compare(va.Value, token.EQL, vb.Value)
	}
	switch a := a.(type) {
	case *ast.Ident:
		b, ok := b.(*ast.Ident)
		if !ok {
			return false
		}
		oa, ob := info.ObjectOf(a), info.ObjectOf(b)
		return oa != nil && oa == ob
	case *ast.SelectorExpr:
		b, ok := b.(*ast.SelectorExpr)
		if !ok || a.Sel.Name != b.Sel.Name {
			return false
		}
		if oa := info.ObjectOf(a.Sel); oa != nil {
			if _, isPkg := info.ObjectOf(identOf(a.X)).(*types.PkgName); isPkg {
				return oa == info.ObjectOf(b.Sel)
			}
		}
		return sameExpr(info, a.X, b.X)
	case *ast.BinaryExpr:
		b, ok := b.(*ast.BinaryExpr)
		return ok && a.Op == b.Op && sameExpr(info, a.X, b.X) && sameExpr(info, a.Y, b.Y)
	case *ast.CallExpr:
		b, ok := b.(*ast.CallExpr)
		if !ok || len(a.Args) != len(b.Args) || !sameExpr(info, a.Fun, b.Fun) {
			return false
		}
		for i := range a.Args {
			if !sameExpr(info, a.Args[i], b.Args[i]) {
				return false
			}
		}
		return true
	case *ast.IndexExpr:
		b, ok := b.(*ast.IndexExpr)
		return ok && sameExpr(info, a.X, b.X) && sameExpr(info, a.Index, b.Index)
	case *ast.StarExpr:
		b, ok := b.(*ast.StarExpr)
		return ok && sameExpr(info, a.X, b.X)
	}
	return false
}

func identOf(e ast.Expr) *ast.Ident {
	id, _ := ast.Unparen(e).(*ast.Ident)
	return id
}

// funcNode is a function with a body: *ast.FuncDecl or *ast.FuncLit.
type funcNode struct {
	node ast.Node
	body *ast.BlockStmt
	typ  *ast.FuncType
	name string // the FuncDecl's name; "" for literals
}

// enclosingFunc returns the innermost function around cur.
func enclosingFunc(cur inspector.Cursor) (funcNode, inspector.Cursor, bool) {
	for c := range cur.Enclosing((*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)) {
		switch n := c.Node().(type) {
		case *ast.FuncDecl:
			if n.Body == nil {
				return funcNode{}, c, false
			}
			return funcNode{node: n, body: n.Body, typ: n.Type, name: n.Name.Name}, c, true
		case *ast.FuncLit:
			return funcNode{node: n, body: n.Body, typ: n.Type}, c, true
		}
	}
	return funcNode{}, inspector.Cursor{}, false
}

// outermostFunc returns the top-level function around cur (the FuncDecl, or
// a FuncLit in a package-level var): the scope in which local variables are
// looked up, closures included.
func outermostFunc(cur inspector.Cursor) (ast.Node, bool) {
	var out ast.Node
	for c := range cur.Enclosing((*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)) {
		out = c.Node()
	}
	return out, out != nil
}

// funcName returns the name of the innermost named function around cur.
func funcName(cur inspector.Cursor) string {
	for c := range cur.Enclosing((*ast.FuncDecl)(nil)) {
		return c.Node().(*ast.FuncDecl).Name.Name
	}
	return ""
}

// walkShallow calls f for every node under n, not descending into function
// literals: their bodies run at another time.
func walkShallow(n ast.Node, f func(ast.Node) bool) {
	ast.Inspect(n, func(m ast.Node) bool {
		if m == nil {
			return false
		}
		if _, ok := m.(*ast.FuncLit); ok && m != n {
			return false
		}
		return f(m)
	})
}

// definition is one assignment of a value to a local variable.
type definition struct {
	rhs   ast.Expr // the assigned expression; the call for a multi-value assignment
	index int      // which result of rhs, for multi-value assignments
	multi bool
}

// definitions returns every assignment to obj inside scope, or ok=false
// when obj is changed in a way that cannot be followed (+=, &obj, range).
// A parameter or field has no definitions in scope.
func definitions(info *types.Info, scope ast.Node, obj types.Object) (defs []definition, ok bool) {
	if scope == nil || obj == nil {
		return nil, false
	}
	ok = true
	ast.Inspect(scope, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				id := identOf(l)
				if id == nil || info.ObjectOf(id) != obj {
					continue
				}
				switch {
				case n.Tok != token.DEFINE && n.Tok != token.ASSIGN:
					ok = false
				case len(n.Lhs) == len(n.Rhs):
					defs = append(defs, definition{rhs: n.Rhs[i]})
				case len(n.Rhs) == 1:
					defs = append(defs, definition{rhs: n.Rhs[0], index: i, multi: true})
				}
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if info.ObjectOf(id) != obj {
					continue
				}
				switch {
				case len(n.Values) == len(n.Names):
					defs = append(defs, definition{rhs: n.Values[i]})
				case len(n.Values) == 1:
					defs = append(defs, definition{rhs: n.Values[0], index: i, multi: true})
				default:
					defs = append(defs, definition{}) // zero value
				}
			}
		case *ast.RangeStmt:
			for _, e := range []ast.Expr{n.Key, n.Value} {
				if id := identOf(e); id != nil && info.ObjectOf(id) == obj {
					ok = false
				}
			}
		case *ast.UnaryExpr:
			if id := identOf(n.X); n.Op == token.AND && id != nil && info.ObjectOf(id) == obj {
				ok = false
			}
		case *ast.IncDecStmt:
			if id := identOf(n.X); id != nil && info.ObjectOf(id) == obj {
				ok = false
			}
		}
		return true
	})
	return defs, ok
}

// isLocal reports whether obj is a variable declared inside scope (not a
// parameter of the outermost function, a field or a package variable).
func isLocal(obj types.Object, scope ast.Node) bool {
	v, ok := obj.(*types.Var)
	if !ok || v.IsField() || scope == nil {
		return false
	}
	var body *ast.BlockStmt
	switch s := scope.(type) {
	case *ast.FuncDecl:
		body = s.Body
	case *ast.FuncLit:
		body = s.Body
	}
	return body != nil && body.Pos() <= v.Pos() && v.Pos() < body.End()
}

// lineOf returns the line of pos, for messages that point elsewhere.
func lineOf(fset *token.FileSet, pos token.Pos) int {
	return fset.Position(pos).Line
}

// render returns n as Go source, for messages and suggested fixes.
func render(fset *token.FileSet, n ast.Node) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, fset, n); err != nil {
		return types.ExprString(n.(ast.Expr))
	}
	return b.String()
}

// words splits an identifier or key text into lower-case words: at
// non-alphanumerics and at camelCase boundaries ("orderLock" -> order,
// lock; "lock:quota:" -> lock, quota).
func words(s string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	rs := []rune(s)
	for i, r := range rs {
		isUpper := r >= 'A' && r <= 'Z'
		isLower := r >= 'a' && r <= 'z'
		isDigit := r >= '0' && r <= '9'
		if !isUpper && !isLower && !isDigit {
			flush()
			continue
		}
		if isUpper && len(cur) > 0 {
			prev := rs[i-1]
			prevLower := (prev >= 'a' && prev <= 'z') || (prev >= '0' && prev <= '9')
			nextLower := i+1 < len(rs) && rs[i+1] >= 'a' && rs[i+1] <= 'z'
			if prevLower || nextLower {
				flush()
			}
		}
		cur = append(cur, r)
	}
	flush()
	return out
}
