package analysis

import (
	"fmt"
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ast/inspector"
)

// BlindRenew finds a lock renewed with a bare EXPIRE.
var BlindRenew = &analysis.Analyzer{
	Name: "blindrenew",
	Doc: `blindrenew: EXPIRE/PEXPIRE on a lock key in a loop, ticker or goroutine, without an owner check

A watchdog that renews with a bare EXPIRE (the spec's own renewal code does)
extends the lock whoever holds it: once this holder's lock has expired and
passed to another process, the renewal extends that process's lock, and a
paused or partitioned holder keeps a lock alive that it no longer owns.
Renew with one script that compares the owner token and then sets the TTL,
as lockgov's watchdog does. Reported when the EXPIRE runs in a for/range
loop, in a goroutine (go func, a function started with go), in a
time.AfterFunc callback, or in a function called from a loop.
Breaks the owner-checked renewal rule.`,
	Requires: requires,
	Run:      runBlindRenew,
}

func runBlindRenew(pass *analysis.Pass) (any, error) {
	cfg := configOf(pass)
	info := pass.TypesInfo
	var repeated map[*types.Func]string // functions run repeatedly, and why
	for cur, call := range calls(pass) {
		exp, ok := redisCall(info, call)
		if !ok || !exp.isExpire() || len(exp.keys) == 0 {
			continue
		}
		scope, _ := outermostFunc(cur)
		key := keyOf(info, scope, exp.keys[0])
		if !cfg.isLockKey(key, funcName(cur)) {
			continue
		}
		why := renewalContext(pass, cur)
		if why == "" {
			if repeated == nil {
				repeated = repeatedFuncs(pass)
			}
			if fd, ok := enclosingDecl(cur); ok {
				if fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok {
					why = repeated[fn]
				}
			}
		}
		if why == "" {
			continue
		}
		report(pass, call, ruleOwnerRenewal, fmt.Sprintf(
			"%s on lock key %s %s renews the lock without checking that this process still owns it: once the lock has expired and passed to another holder, this extends that holder's lock; renew with one owner-checked script (compare the token, then PEXPIRE), as lockgov's watchdog does",
			exp.cmd, describeKey(pass, key), why))
	}
	return nil, nil
}

// renewalContext says why the code at cur runs repeatedly or in the
// background, or "".
func renewalContext(pass *analysis.Pass, cur inspector.Cursor) string {
	for c := range cur.Enclosing((*ast.ForStmt)(nil), (*ast.RangeStmt)(nil), (*ast.FuncLit)(nil), (*ast.FuncDecl)(nil)) {
		switch n := c.Node().(type) {
		case *ast.ForStmt, *ast.RangeStmt:
			return "in a loop"
		case *ast.FuncLit:
			switch p := c.Parent().Node().(type) {
			case *ast.CallExpr:
				if p.Fun == n {
					if _, ok := c.Parent().Parent().Node().(*ast.GoStmt); ok {
						return "in a goroutine"
					}
				} else if isPkgFunc(calleeFunc(pass.TypesInfo, p), "time", "AfterFunc") {
					return "in a time.AfterFunc callback"
				}
			}
			return ""
		default:
			return ""
		}
	}
	return ""
}

func enclosingDecl(cur inspector.Cursor) (*ast.FuncDecl, bool) {
	for c := range cur.Enclosing((*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)) {
		fd, ok := c.Node().(*ast.FuncDecl)
		return fd, ok
	}
	return nil, false
}

// repeatedFuncs returns the package's functions that are started with go
// or called in a loop, with where.
func repeatedFuncs(pass *analysis.Pass) map[*types.Func]string {
	out := map[*types.Func]string{}
	for cur, call := range calls(pass) {
		fn := calleeFunc(pass.TypesInfo, call)
		if fn == nil || fn.Pkg() != pass.Pkg || out[fn] != "" {
			continue
		}
		line := lineOf(pass.Fset, call.Pos())
		if _, ok := cur.Parent().Node().(*ast.GoStmt); ok {
			out[fn] = fmt.Sprintf("in a goroutine (go %s, line %d)", fn.Name(), line)
			continue
		}
		if renewalContext(pass, cur) == "in a loop" {
			out[fn] = fmt.Sprintf("in a loop (%s is called in one at line %d)", fn.Name(), line)
		}
	}
	return out
}
