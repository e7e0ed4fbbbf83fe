package analysis

import (
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// keyExpr is what the analyzers know about a key expression: its constant
// text and the names in its variable parts.
type keyExpr struct {
	expr   ast.Expr
	shown  ast.Expr // expr, or what the local variable expr names was set to
	prefix string   // the constant text the key starts with; "" if it starts with a variable part
	full   bool     // the key is entirely constant: prefix is all of it
	consts []string // every constant fragment, in order
	names  []string // identifiers, field and type names in the variable parts
}

// keyOf follows e through constants, string concatenation, fmt.Sprintf and
// local variables assigned once (within scope, the outermost function).
func keyOf(info *types.Info, scope ast.Node, e ast.Expr) keyExpr {
	k := keyExpr{expr: e, shown: e}
	for range 8 {
		id := identOf(k.shown)
		if id == nil {
			break
		}
		v, ok := info.ObjectOf(id).(*types.Var)
		if !ok || !isLocal(v, scope) {
			break
		}
		defs, ok := definitions(info, scope, v)
		if !ok || len(defs) != 1 || defs[0].multi || defs[0].rhs == nil {
			break
		}
		k.shown = defs[0].rhs
	}
	var frags []fragment
	collectFragments(info, scope, e, 0, &frags)
	leading := true
	for _, f := range frags {
		if f.expr == nil {
			k.consts = append(k.consts, f.text)
			if leading {
				k.prefix += f.text
			}
			continue
		}
		leading = false
		k.names = append(k.names, exprNames(info, f.expr)...)
	}
	k.full = leading && len(frags) > 0
	return k
}

// fragment is a constant piece of a key (expr == nil) or a variable one.
type fragment struct {
	text string
	expr ast.Expr
}

func collectFragments(info *types.Info, scope ast.Node, e ast.Expr, depth int, out *[]fragment) {
	e = ast.Unparen(e)
	if s, ok := stringConst(info, e); ok {
		*out = append(*out, fragment{text: s})
		return
	}
	if depth > 8 {
		*out = append(*out, fragment{expr: e})
		return
	}
	switch x := e.(type) {
	case *ast.BinaryExpr:
		if x.Op == token.ADD {
			collectFragments(info, scope, x.X, depth+1, out)
			collectFragments(info, scope, x.Y, depth+1, out)
			return
		}
	case *ast.CallExpr:
		if fn := calleeFunc(info, x); isPkgFunc(fn, "fmt", "Sprintf") && len(x.Args) > 0 {
			if format, ok := stringConst(info, x.Args[0]); ok {
				sprintfFragments(format, x.Args[1:], out)
				return
			}
		}
	case *ast.Ident:
		obj := info.ObjectOf(x)
		if v, ok := obj.(*types.Var); ok && isLocal(v, scope) {
			defs, ok := definitions(info, scope, v)
			if ok && len(defs) == 1 && !defs[0].multi && defs[0].rhs != nil {
				collectFragments(info, scope, defs[0].rhs, depth+1, out)
				return
			}
		}
	}
	*out = append(*out, fragment{expr: e})
}

// sprintfFragments splits a format into its literal text and one variable
// fragment per verb.
func sprintfFragments(format string, args []ast.Expr, out *[]fragment) {
	var lit strings.Builder
	arg := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			lit.WriteByte(format[i])
			continue
		}
		if i+1 < len(format) && format[i+1] == '%' {
			lit.WriteByte('%')
			i++
			continue
		}
		j := i + 1
		for j < len(format) && strings.IndexByte("+-# 0123456789.*[]", format[j]) >= 0 {
			j++
		}
		if lit.Len() > 0 {
			*out = append(*out, fragment{text: lit.String()})
			lit.Reset()
		}
		var e ast.Expr = &ast.BadExpr{}
		if arg < len(args) {
			e = args[arg]
		}
		arg++
		*out = append(*out, fragment{expr: e})
		i = j
	}
	if lit.Len() > 0 {
		*out = append(*out, fragment{text: lit.String()})
	}
}

// exprNames returns the identifiers, selected field names, and the named
// types of selector bases in e: for l.key with l a *RedisLock, "l", "key"
// and "RedisLock".
func exprNames(info *types.Info, e ast.Expr) []string {
	var names []string
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			names = append(names, n.Name)
		case *ast.SelectorExpr:
			if tv, ok := info.Types[n.X]; ok && tv.Type != nil {
				if name := namedName(tv.Type); name != "" {
					names = append(names, name)
				}
			}
		case *ast.FuncLit:
			return false
		}
		return true
	})
	return names
}

// lockWords are the words that make a key, or a name in its variable part,
// a lock's in the default heuristic.
var lockWords = []string{"lock", "locks", "unlock", "mutex", "mutexes", "redlock", "redislock"}

func hasLockWord(texts ...string) bool {
	for _, t := range texts {
		for _, w := range words(t) {
			if slices.Contains(lockWords, w) {
				return true
			}
		}
	}
	return false
}

// isLockKey reports whether k is a lock's key. With a policy, a key with
// constant text is a lock key when that text matches a declared pattern;
// without one, when its constant text has a lock/mutex word. A key with no
// constant prefix (l.key, lockKey) is judged by its names and the function
// it is used in (RedisLock.Unlock), in both modes.
func (c *config) isLockKey(k keyExpr, fn string) bool {
	if c.policy != nil && k.prefix != "" {
		if k.full {
			_, rule := c.matcher.Match(k.prefix)
			return rule.Pattern != ""
		}
		for _, p := range c.prefixes {
			if strings.HasPrefix(k.prefix, p) || strings.HasPrefix(p, k.prefix) {
				return true
			}
		}
		return false
	}
	if c.policy == nil && len(k.consts) > 0 && hasLockWord(k.consts...) {
		return true
	}
	if len(k.consts) > 0 && k.prefix != "" {
		return false
	}
	return hasLockWord(k.names...) || hasLockWord(fn)
}

// describe returns k for a message: the constant key quoted, else its
// source text.
func (k keyExpr) describe(render func(ast.Node) string) string {
	if k.full {
		return strconv.Quote(k.prefix)
	}
	return render(k.shown)
}

// describeKey returns k for a message.
func describeKey(pass *analysis.Pass, k keyExpr) string {
	return k.describe(func(n ast.Node) string { return render(pass.Fset, n) })
}
