package analysis

import (
	"go/ast"
	"go/types"
)

// noDeadline reports whether the context e has no deadline as the function
// builds it: context.Background() or TODO(), a context derived from one
// without WithTimeout or WithDeadline, or one that went through
// context.WithoutCancel (which drops the deadline). origin names where it
// came from, for the message.
//
// Parameters, fields and the results of other calls are trusted: the
// caller, or the callee, may have set a deadline, and an analyzer that
// cannot see it says nothing.
func noDeadline(info *types.Info, scope ast.Node, e ast.Expr) (origin string, ok bool) {
	return noDeadlineDepth(info, scope, e, 0)
}

func noDeadlineDepth(info *types.Info, scope ast.Node, e ast.Expr, depth int) (string, bool) {
	if depth > 8 || e == nil {
		return "", false
	}
	switch x := ast.Unparen(e).(type) {
	case *ast.CallExpr:
		fn := calleeFunc(info, x)
		switch {
		case isPkgFunc(fn, "context", "Background", "TODO"):
			return "context." + fn.Name() + "()", true
		case isPkgFunc(fn, "context", "WithoutCancel"):
			return "context.WithoutCancel, which drops the deadline", true
		case isPkgFunc(fn, "context", "WithCancel", "WithCancelCause", "WithValue"),
			isPkgFunc(fn, "os/signal", "NotifyContext"),
			isPkgFunc(fn, "golang.org/x/sync/errgroup", "WithContext"):
			if len(x.Args) > 0 {
				return noDeadlineDepth(info, scope, x.Args[0], depth+1)
			}
		}
	case *ast.Ident:
		v, ok := info.ObjectOf(x).(*types.Var)
		if !ok || !isLocal(v, scope) {
			return "", false
		}
		defs, ok := definitions(info, scope, v)
		if !ok || len(defs) == 0 {
			return "", false
		}
		var origin string
		for _, d := range defs {
			if d.rhs == nil || d.multi && d.index != 0 {
				return "", false
			}
			o, ok := noDeadlineDepth(info, scope, d.rhs, depth+1)
			if !ok {
				return "", false
			}
			if origin == "" {
				origin = o
			}
		}
		return origin, true
	}
	return "", false
}
