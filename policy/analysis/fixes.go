package analysis

import (
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ast/inspector"
)

// validAt reports whether e means the same at pos as where it is written:
// every variable it names is declared before pos and visible there. A fix
// that moves an expression checks this first.
func validAt(pass *analysis.Pass, e ast.Expr, pos token.Pos) bool {
	scope := pass.Pkg.Scope().Innermost(pos)
	if scope == nil {
		return false
	}
	ok := true
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			ast.Inspect(n.X, func(m ast.Node) bool {
				if id, isID := m.(*ast.Ident); isID && !identVisible(pass.TypesInfo, scope, id, pos) {
					ok = false
				}
				return ok
			})
			return false
		case *ast.Ident:
			if !identVisible(pass.TypesInfo, scope, n, pos) {
				ok = false
			}
		case *ast.FuncLit:
			ok = false
		}
		return ok
	})
	return ok
}

func identVisible(info *types.Info, scope *types.Scope, id *ast.Ident, pos token.Pos) bool {
	obj := info.Uses[id]
	if obj == nil {
		return true // a blank or a field name in a literal
	}
	_, found := scope.LookupParent(id.Name, pos)
	return found == obj
}

// stmtOf returns the statement that contains cur's node.
func stmtOf(cur inspector.Cursor) (ast.Stmt, inspector.Cursor, bool) {
	for c := cur; c.Valid(); c = c.Parent() {
		if s, ok := c.Node().(ast.Stmt); ok {
			return s, c, true
		}
	}
	return nil, inspector.Cursor{}, false
}

// deleteLines returns the edit that removes the whole lines n spans.
func deleteLines(fset *token.FileSet, n ast.Node) analysis.TextEdit {
	f := fset.File(n.Pos())
	start := f.LineStart(f.Line(n.Pos()))
	end := n.End()
	if l := f.Line(n.End()); l < f.LineCount() {
		end = f.LineStart(l + 1)
	}
	return analysis.TextEdit{Pos: start, End: end}
}

// indentOf returns the indentation of the line n starts on.
func indentOf(fset *token.FileSet, src []byte, n ast.Node) string {
	f := fset.File(n.Pos())
	if f == nil || src == nil {
		return "\t"
	}
	start := f.Offset(f.LineStart(f.Line(n.Pos())))
	i := start
	for i < len(src) && (src[i] == '\t' || src[i] == ' ') {
		i++
	}
	return string(src[start:i])
}

// fileSource returns the source of the file that holds pos.
func fileSource(pass *analysis.Pass, pos token.Pos) []byte {
	f := pass.Fset.File(pos)
	if f == nil {
		return nil
	}
	src, err := pass.ReadFile(f.Name())
	if err != nil {
		return nil
	}
	return src
}
