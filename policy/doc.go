// Package policy holds lockgov's governance rules as data: the YAML policy
// file, the key patterns that turn raw lock keys into bounded metric labels,
// and the clock-skew tiers.
//
// It depends on no backend client; instrument, the backends, the detectors
// and the agent all read their rules from here.
//
// # Example
//
//	pol, err := policy.Load("policy.yaml")
//	if err != nil {
//		return err // e.g. policy.yaml:7: patterns[0].ttl: "-5s" must be > 0
//	}
//	m := policy.NewMatcher(pol)
//	label, rule := m.Match("lock:quota:42") // "lock:quota:{merchant_id}", its Rule
//	_, _ = label, rule
//	switch pol.Skew.Tier(offset) {
//	case policy.TierDegrade:
//		ttl = pol.Skew.DegradeTTL(ttl)
//	case policy.TierReject:
//		return instrument.ErrClockSkew
//	}
//
// # File format
//
// A complete policy (testdata/example.yaml is a longer one). Durations are
// Go duration strings. Every field is optional: fields the file omits take
// the values of Default(), fields a pattern omits take the values of
// defaults (field by field, inside wait too), and an empty file is Default().
// A missing version means 1, the only version.
//
//	version: 1
//	defaults:
//	  mode: enforce          # enforce | audit | off
//	  ttl: 30s               # lease TTL when the caller chooses none
//	  min_ttl: 10ms          # bounds on a caller-chosen TTL
//	  max_ttl: 10m
//	  max_hold: 0s           # 0 = unlimited
//	  wait: {strategy: deadline, poll_interval: 1s}
//	patterns:
//	  - pattern: "lock:quota:{merchant_id}"
//	    mode: enforce
//	    ttl: 10s
//	    max_ttl: 1m
//	    max_hold: 5m
//	    wait: {strategy: retry, backoff: exponential, min: 10ms, max: 500ms, attempts: 8}
//	skew:
//	  degrade: 100ms
//	  reject: 500ms
//	  degrade_ttl_factor: 0.7
//	max_patterns: 200
//
// wait.strategy is deadline (wait for a release notification until the
// context deadline, polling every poll_interval as a fallback), fail_fast
// (one attempt) or retry (attempts tries, with backoff exponential from min
// to max, or constant at min). Retry needs attempts >= 1 and min > 0: a zero
// pause would be a busy loop against the store.
//
// Parse reports every problem, each as FILE:LINE: FIELD: problem, for
// example
//
//	policy.yaml:3: defaults.tll: unknown field (known: mode, ttl, min_ttl, max_ttl, max_hold, wait)
//	policy.yaml:7: patterns[0].ttl: "-5s" must be > 0
//
// Unknown fields, duplicate fields, wrong types and bad durations are errors,
// as are ttl <= 0, min_ttl > ttl, ttl > max_ttl, exponential backoff with
// min > max, an unknown mode, strategy or backoff, skew degrade >= reject, a
// degrade_ttl_factor outside (0, 1], max_patterns < 1, a version other than
// 1, and a bad pattern. A conflict between an inherited value and one the
// pattern sets is reported at the line of the one it sets.
//
// # Patterns and labels
//
// A pattern is literal text with placeholders {name}. A placeholder matches
// one or more characters other than ':', except a placeholder that ends the
// pattern, which matches the rest of the key (one or more of any character).
// A pattern without placeholders matches exactly one key. Patterns are tried
// in file order and the first match wins; empty, duplicate and malformed
// patterns (unbalanced braces, {}, two adjacent placeholders) are rejected.
//
// Metrics never carry raw keys. Matcher.Match labels a key with the first
// declared pattern it matches, else with Normalize(key), which replaces
// numbers, UUIDs, hex hashes and long alphanumeric tokens with {id}
// ("lock:order:12345" -> "lock:order:{id}", "lock:quota:{42}" ->
// "lock:quota:{id}"). The normaliser may create at most MaxPatterns labels;
// declared patterns do not count against that cap, because the file already
// bounds them. Past the cap a new label is "other", while labels seen before
// it keep their names, so existing series do not move. Keys that are not
// valid UTF-8 are "other" too, because no metrics backend accepts them as a
// label value.
//
// Match keeps no per-key state: memory is bounded by the cap, not by the
// number of distinct keys (one per order, per merchant). A key whose label is
// known costs a pattern scan, a normalisation into a stack buffer and a
// lock-free map lookup, without allocating; see BenchmarkMatch.
//
// # Clock-skew tiers
//
// SkewTiers implements the spec's drift response table on |offset| (the
// sign does not matter): up to 100ms ok, the offset is only reported; up to
// 500ms degrade, new leases get their TTL x0.7 so a fast clock cannot
// outlive its lease on the store; above 500ms reject, new locks and IDs are
// refused with instrument.ErrClockSkew until the clock is back. Leases
// already held are not touched by a tier change: the watchdog and the
// lease's drift margin govern them. A zero SkewTiers field takes its default.
//
// # Failure modes
//
// A policy that fails Parse or Validate is never half-applied: Load returns
// no Policy and the caller keeps the one it has. NewMatcher does not fail:
// given a policy that was not validated, a pattern that does not compile
// never matches and its keys fall through to the normaliser. The Policy
// passed to NewMatcher must not be modified afterwards; Match returns
// pointers into it.
package policy
