package policy_test

import (
	"fmt"
	"time"

	"github.com/lockgov/lockgov/policy"
)

func ExampleLoad() {
	p, err := policy.Load("testdata/example.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Patterns[0].Pattern, p.Patterns[0].TTL, p.Patterns[0].Wait.Strategy)
	// Output: lock:quota:{merchant_id} 10s retry
}

func ExampleParse() {
	_, err := policy.Parse("policy.yaml", []byte(`version: 1
defaults:
  ttl: 30s
patterns:
  - pattern: "lock:quota:{merchant_id}"
    ttl: -5s
`))
	fmt.Println(err)
	// Output: policy.yaml:6: patterns[0].ttl: "-5s" must be > 0
}

func ExampleMatcher_Match() {
	p, _ := policy.Parse("policy.yaml", []byte(`
patterns:
  - pattern: "lock:quota:{merchant_id}"
    ttl: 10s
`))
	m := policy.NewMatcher(p)
	for _, key := range []string{"lock:quota:42", "lock:order:12345"} {
		label, rule := m.Match(key)
		fmt.Println(label, rule.TTL)
	}
	// Output:
	// lock:quota:{merchant_id} 10s
	// lock:order:{id} 30s
}

func ExampleNormalize() {
	fmt.Println(policy.Normalize("lock:user:550e8400-e29b-41d4-a716-446655440000:profile"))
	fmt.Println(policy.Normalize("lock:quota:{42}"))
	// Output:
	// lock:user:{id}:profile
	// lock:quota:{id}
}

func ExampleSkewTiers_Tier() {
	s := policy.Default().Skew
	for _, off := range []time.Duration{80 * time.Millisecond, -300 * time.Millisecond, 600 * time.Millisecond} {
		tier := s.Tier(off)
		ttl := 30 * time.Second
		if tier == policy.TierDegrade {
			ttl = s.DegradeTTL(ttl)
		}
		fmt.Println(off, tier, ttl)
	}
	// Output:
	// 80ms ok 30s
	// -300ms degrade 21s
	// 600ms reject 30s
}
