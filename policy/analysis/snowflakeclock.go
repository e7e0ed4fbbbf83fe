package analysis

import (
	"go/ast"
	"go/token"
	"go/types"
	"slices"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ast/inspector"
)

// SnowflakeClock finds ID generators that trust the wall clock. Opt-in.
var SnowflakeClock = &analysis.Analyzer{
	Name: "snowflakeclock",
	Doc: `snowflakeclock (opt-in: -enable snowflakeclock): a time.Now-based ID generator with no backwards-clock check

A Snowflake-style generator that shifts a time.Now timestamp into an ID
(ts << bits) reissues timestamps it already used when NTP steps the clock
back, and with them duplicate IDs (the spec: 小幅回拨（5ms 内）自旋等待；超过
阈值直接拒绝服务). Reported at the clock read when the function composes an
ID from it with << and never compares the timestamp with an ordering
operator in an if or switch (now < last), nor calls Before, After or
Compare on it. A helper that only returns time.Now() counts as a clock
read. Only functions named like ID generators (NextID, Generate, IDGen, a
method of Snowflake or Worker) are checked. lockgov's snowflake package
reads a monotonic clock and needs none of this. Opt-in because the name
and shape heuristics are right for code that makes IDs and noisy
elsewhere. Breaks the unique ids rule.`,
	Requires: requires,
	Run:      runSnowflakeClock,
}

func runSnowflakeClock(pass *analysis.Pass) (any, error) {
	conf := configOf(pass)
	if !conf.enabled["snowflakeclock"] {
		return nil, nil
	}
	info := pass.TypesInfo
	in := inspectorOf(pass)
	readers := clockReaders(pass, in)
	for c := range in.Root().Preorder((*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)) {
		if conf.skip(pass, c.Node()) {
			continue
		}
		var body *ast.BlockStmt
		switch n := c.Node().(type) {
		case *ast.FuncDecl:
			body = n.Body
		case *ast.FuncLit:
			body = n.Body
		}
		if body == nil || !namesIDGenerator(info, c) {
			continue
		}
		read, vars := clockReads(info, body, readers)
		if read == nil || !composesID(info, body, read, vars) || checksOrder(info, body, read, vars) {
			continue
		}
		report(pass, read, ruleUniqueIDs, "ID generator reads the wall clock here and shifts it into IDs with no backwards-clock check: after the clock steps back it reissues timestamps it already used, and duplicate IDs; compare with the last timestamp and wait (up to a few ms) or refuse, or use lockgov's snowflake package")
	}
	return nil, nil
}

func inspectorOf(pass *analysis.Pass) *inspector.Inspector {
	return pass.ResultOf[requires[0]].(*inspector.Inspector)
}

// isClockRead reports whether call reads the wall clock: time.Now, or a
// function of this package that returns time.Now (a timeGen helper).
func isClockRead(info *types.Info, call *ast.CallExpr, readers map[*types.Func]bool) bool {
	fn := calleeFunc(info, call)
	return isPkgFunc(fn, "time", "Now") || readers[fn]
}

// clockReaders returns the package's functions whose body returns a value
// computed from time.Now() directly.
func clockReaders(pass *analysis.Pass, in *inspector.Inspector) map[*types.Func]bool {
	out := map[*types.Func]bool{}
	for c := range in.Root().Preorder((*ast.FuncDecl)(nil)) {
		fd := c.Node().(*ast.FuncDecl)
		if fd.Body == nil || len(fd.Body.List) != 1 {
			continue
		}
		ret, ok := fd.Body.List[0].(*ast.ReturnStmt)
		if !ok || len(ret.Results) != 1 {
			continue
		}
		found := false
		ast.Inspect(ret.Results[0], func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && isPkgFunc(calleeFunc(pass.TypesInfo, call), "time", "Now") {
				found = true
			}
			return !found
		})
		if fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok && found {
			out[fn] = true
		}
	}
	return out
}

// clockReads returns the first clock read in body and the variables its
// value is assigned to (now := time.Now().UnixMilli()).
func clockReads(info *types.Info, body *ast.BlockStmt, readers map[*types.Func]bool) (*ast.CallExpr, map[types.Object]bool) {
	var first *ast.CallExpr
	vars := map[types.Object]bool{}
	walkShallow(body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if ok && len(as.Lhs) == len(as.Rhs) {
			for i, r := range as.Rhs {
				if c := clockCall(info, r, readers); c != nil {
					if first == nil {
						first = c
					}
					if id := identOf(as.Lhs[i]); id != nil && info.ObjectOf(id) != nil {
						vars[info.ObjectOf(id)] = true
					}
				}
			}
		}
		if call, ok := n.(*ast.CallExpr); ok && first == nil && isClockRead(info, call, readers) {
			first = call
		}
		return true
	})
	return first, vars
}

// clockCall returns the clock read in e, if any.
func clockCall(info *types.Info, e ast.Expr, readers map[*types.Func]bool) *ast.CallExpr {
	var found *ast.CallExpr
	ast.Inspect(e, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && found == nil && isClockRead(info, call, readers) {
			found = call
		}
		return found == nil
	})
	return found
}

// mentionsClock reports whether e uses the clock read or a variable that
// holds it.
func mentionsClock(info *types.Info, e ast.Node, read *ast.CallExpr, vars map[types.Object]bool) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			found = found || vars[info.ObjectOf(n)]
		case *ast.CallExpr:
			found = found || n == read
		}
		return !found
	})
	return found
}

// composesID reports whether body shifts the timestamp into a value: (now -
// epoch) << 22.
func composesID(info *types.Info, body *ast.BlockStmt, read *ast.CallExpr, vars map[types.Object]bool) bool {
	found := false
	walkShallow(body, func(n ast.Node) bool {
		if b, ok := n.(*ast.BinaryExpr); ok && b.Op == token.SHL && mentionsClock(info, b.X, read, vars) {
			found = true
		}
		return !found
	})
	return found
}

// checksOrder reports whether body compares the timestamp with an ordering
// operator in an if or switch condition, or calls Before/After/Compare.
func checksOrder(info *types.Info, body *ast.BlockStmt, read *ast.CallExpr, vars map[types.Object]bool) bool {
	found := false
	check := func(cond ast.Expr) {
		ast.Inspect(cond, func(n ast.Node) bool {
			if b, ok := n.(*ast.BinaryExpr); ok {
				switch b.Op {
				case token.LSS, token.GTR, token.LEQ, token.GEQ:
					if mentionsClock(info, b, read, vars) {
						found = true
					}
				}
			}
			return !found
		})
	}
	walkShallow(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt:
			check(n.Cond)
		case *ast.CaseClause:
			for _, e := range n.List {
				check(e)
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Before" || sel.Sel.Name == "After" || sel.Sel.Name == "Compare") && mentionsClock(info, n, read, vars) {
				found = true
			}
		}
		return !found
	})
	return found
}

var idGenWords = []string{"id", "ids", "uid", "uuid", "snowflake", "flake", "sonyflake", "generator", "gen", "generate", "next", "seq", "sequence", "worker"}

// namesIDGenerator reports whether the function at c, or the type whose
// method it is, is named like an ID generator (NextID, Snowflake.Generate,
// IDGen): a timestamp shifted elsewhere (a packed connection state) is not
// an ID.
func namesIDGenerator(info *types.Info, c inspector.Cursor) bool {
	var names []string
	for e := range c.Enclosing((*ast.FuncDecl)(nil)) {
		fd := e.Node().(*ast.FuncDecl)
		names = append(names, fd.Name.Name)
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			if t := info.TypeOf(fd.Recv.List[0].Type); t != nil {
				names = append(names, namedName(t))
			}
		}
	}
	for _, n := range names {
		for _, w := range words(n) {
			if slices.Contains(idGenWords, w) {
				return true
			}
		}
	}
	return false
}
