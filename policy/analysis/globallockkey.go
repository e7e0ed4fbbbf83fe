package analysis

import (
	"fmt"
	"go/ast"
	"go/types"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ast/inspector"

	"github.com/lockgov/lockgov/policy"
)

// GlobalLockKey finds a constant lock key where a per-entity one belongs.
var GlobalLockKey = &analysis.Analyzer{
	Name: "globallockkey",
	Doc: `globallockkey: a constant lock key with no variable part, in a function that works on one entity

"lock:order" serialises every order; "lock:order:{order_id}" only the
requests for the same order (the spec: 按业务主键分段加锁（lock:order:1001）
远好于全局大锁（lock:order），后者会让所有订单串行). Reported for the key of a
lock acquisition or mutex (go-redis SET NX, lockgov Acquire and Do, bsm
Obtain, etcd NewMutex, redsync NewMutex) when the key is constant, has no id
in it (policy.Normalize leaves it unchanged), and the function has a
parameter that names one entity (orderID, merchant_id, userId): the lock
should be keyed by it. A constant key in a function without such a
parameter is taken for a deliberate singleton (a cron job's lock), as is a
key the policy declares as an exact pattern.
Breaks the key granularity rule.`,
	Requires: requires,
	Run:      runGlobalLockKey,
}

func runGlobalLockKey(pass *analysis.Pass) (any, error) {
	conf := configOf(pass)
	info := pass.TypesInfo
	for cur, call := range calls(pass) {
		op, ok := lockCall(info, call)
		if !ok || op.key == nil {
			continue
		}
		scope, _ := outermostFunc(cur)
		key := keyOf(info, scope, op.key)
		if !key.full || key.prefix == "" || policy.Normalize(key.prefix) != key.prefix || conf.exact[key.prefix] {
			continue
		}
		if op.redis != nil && !conf.isLockKey(key, funcName(cur)) {
			continue
		}
		param := entityParam(info, cur)
		if param == nil {
			continue
		}
		id := param.Name()
		suggestion, fixPrefix := suggestKey(key.prefix, id), key.prefix
		if pat := conf.declaredPattern(key.prefix); pat != "" {
			// The policy says what the key should look like.
			suggestion = pat
			if lit, rest, _ := strings.Cut(pat, "{"); strings.Count(rest, "{") == 0 && strings.HasSuffix(rest, "}") {
				fixPrefix = lit
			}
		}
		report(pass, op.key, ruleKeyGranularity, fmt.Sprintf(
			"%s takes the constant lock key %q while this function works on one %s: every call serialises on the same lock; put the id in the key (%s)",
			op.api, key.prefix, id, suggestion), keyFix(pass, op.key, fixPrefix, param)...)
	}
	return nil, nil
}

// entityParam returns the first parameter of the functions around cur
// that names one entity by id.
func entityParam(info *types.Info, cur inspector.Cursor) types.Object {
	for c := range cur.Enclosing((*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)) {
		var ft *ast.FuncType
		switch n := c.Node().(type) {
		case *ast.FuncDecl:
			ft = n.Type
		case *ast.FuncLit:
			ft = n.Type
		}
		for _, f := range ft.Params.List {
			for _, name := range f.Names {
				if isIDName(name.Name) {
					return info.Defs[name]
				}
			}
		}
	}
	return nil
}

// isIDName reports whether name is an id of one thing: orderID, order_id,
// merchantId, uid. A bare "id" counts too.
func isIDName(name string) bool {
	ws := words(name)
	if len(ws) == 0 {
		return false
	}
	last := ws[len(ws)-1]
	return last == "id" || last == "uid" || last == "uuid" || last == "sn" || last == "no" && len(ws) > 1
}

// suggestKey shows the key with the id in it: "lock:order" + orderID ->
// lock:order:{order_id}.
func suggestKey(key, param string) string {
	sep := ":"
	if strings.HasPrefix(key, "/") {
		sep = "/"
	}
	return strings.TrimRight(key, ":/") + sep + "{" + strings.Join(words(param), "_") + "}"
}

// keyFix appends a string id parameter to a literal key: "lock:order" ->
// "lock:order:"+orderID.
func keyFix(pass *analysis.Pass, e ast.Expr, key string, param types.Object) []analysis.SuggestedFix {
	lit, ok := ast.Unparen(e).(*ast.BasicLit)
	if b, isBasic := param.Type().Underlying().(*types.Basic); !ok || !isBasic || b.Info()&types.IsString == 0 || !validAt(pass, ast.NewIdent(param.Name()), e.Pos()) {
		return nil
	}
	sep := ":"
	if strings.HasPrefix(key, "/") {
		sep = "/"
	}
	if strings.HasSuffix(key, sep) {
		sep = ""
	}
	return []analysis.SuggestedFix{{
		Message:   "key the lock by " + param.Name(),
		TextEdits: []analysis.TextEdit{{Pos: lit.Pos(), End: lit.End(), NewText: []byte(strconv.Quote(key+sep) + " + " + param.Name())}},
	}}
}
