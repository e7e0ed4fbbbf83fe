package analysis

import (
	"go/ast"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// The rules findings name: the policy's three musts (timeout, fallback
// release, trace propagation) and the properties the spec asks of every lock
// and ID (safe release and renewal by the owner only, fine-grained keys,
// idempotency behind the lock, mutual exclusion, unique IDs).
const (
	ruleTimeout         = "timeout"
	ruleFallbackRelease = "fallback release"
	ruleOwnerRelease    = "owner-checked release"
	ruleOwnerRenewal    = "owner-checked renewal"
	ruleKeyGranularity  = "key granularity"
	ruleIdempotency     = "idempotency"
	ruleMutualExclusion = "mutual exclusion"
	ruleUniqueIDs       = "unique ids"
)

// All returns every analyzer, the opt-in ones included, in a fixed order.
func All() []*analysis.Analyzer {
	return []*analysis.Analyzer{
		SetNXExpire, UnsafeUnlock, BlindRenew, NoDeadline, MissingRelease,
		GlobalLockKey, MarkerBeforeWrite, UncheckedTxn, SnowflakeClock,
	}
}

// OptIn returns the names of the analyzers that report only when enabled
// (-enable NAME): their heuristics are right for code that generates IDs
// and noisy elsewhere.
func OptIn() []string { return []string{"snowflakeclock"} }

// requires is every analyzer's Requires.
var requires = []*analysis.Analyzer{inspect.Analyzer, configAnalyzer}

// report reports a finding on n that breaks rule. The rule travels twice:
// as the diagnostic's category (for -json) and at the end of the message,
// so that go vet's plain output shows it too.
func report(pass *analysis.Pass, n ast.Node, rule, msg string, fixes ...analysis.SuggestedFix) {
	pass.Report(analysis.Diagnostic{
		Pos:            n.Pos(),
		End:            n.End(),
		Category:       rule,
		Message:        msg + " (rule: " + rule + ")",
		SuggestedFixes: fixes,
	})
}

// calls yields every call expression in the files pass checks, with its
// cursor.
func calls(pass *analysis.Pass) func(yield func(inspector.Cursor, *ast.CallExpr) bool) {
	in := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	cfg := configOf(pass)
	return func(yield func(inspector.Cursor, *ast.CallExpr) bool) {
		for cur := range in.Root().Preorder((*ast.CallExpr)(nil)) {
			call := cur.Node().(*ast.CallExpr)
			if cfg.skip(pass, call) {
				continue
			}
			if !yield(cur, call) {
				return
			}
		}
	}
}
