package policy

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

func policyWith(patterns ...string) *Policy {
	p := Default()
	for i, s := range patterns {
		r := p.Defaults
		r.Pattern = s
		r.TTL = time.Duration(i+1) * time.Second
		p.Patterns = append(p.Patterns, r)
	}
	return p
}

func TestMatch_DeclaredPatternsFirstMatchWins(t *testing.T) {
	p := policyWith(
		"lock:quota:{merchant_id}",
		"lock:order:{order_id}:pay",
		"lock:{a}-{b}:x",
		"lock:exact",
		"job:{name}",
		"lock:order:{order_id}", // after the :pay pattern, so :pay keys go there
		"{tenant}:cfg",
	)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(p)
	cases := []struct {
		key, label string
		rule       int // index into p.Patterns, -1 for defaults
	}{
		{"lock:quota:42", "lock:quota:{merchant_id}", 0},
		{"lock:quota:m-9", "lock:quota:{merchant_id}", 0},
		// A placeholder that ends the pattern takes the rest of the key, ':' included.
		{"lock:quota:42:extra", "lock:quota:{merchant_id}", 0},
		{"lock:quota:", "lock:quota:", -1}, // a placeholder needs one character
		{"lock:order:77:pay", "lock:order:{order_id}:pay", 1},
		// A middle placeholder does not cross ':'.
		{"lock:order:7:7:pay", "lock:order:{order_id}", 5},
		{"lock:order:77", "lock:order:{order_id}", 5},
		{"lock:1-2-3:x", "lock:{a}-{b}:x", 2}, // needs backtracking over '-'
		{"lock:1-:x", "lock:1-:x", -1},        // {b} needs one character
		{"lock:exact", "lock:exact", 3},
		{"lock:exact2", "lock:exact2", -1}, // literal patterns match exactly
		{"job:nightly:report:2024", "job:{name}", 4},
		{"acme:cfg", "{tenant}:cfg", 6},
		{"a:b:cfg", "a:b:cfg", -1},
		{"lock:other:12345", "lock:other:{id}", -1},
	}
	for _, c := range cases {
		label, rule := m.Match(c.key)
		want := &p.Defaults
		if c.rule >= 0 {
			want = &p.Patterns[c.rule]
		}
		if label != c.label || rule != want {
			t.Errorf("Match(%q) = %q, %q; want %q, %q", c.key, label, rule.Pattern, c.label, want.Pattern)
		}
	}
}

func TestMatch_NilPolicyUsesDefault(t *testing.T) {
	label, rule := NewMatcher(nil).Match("lock:order:1")
	if label != "lock:order:{id}" || rule.TTL != 30*time.Second {
		t.Errorf("Match = %q, %+v", label, rule)
	}
}

func TestMatch_PastCapNewLabelsAreOtherAndSeenLabelsStay(t *testing.T) {
	p := policyWith("lock:quota:{m}")
	p.MaxPatterns = 3
	m := NewMatcher(p)
	for i := range 3 {
		key := fmt.Sprintf("lock:kind%c:%d", 'a'+i, i)
		if l, _ := m.Match(key); l != fmt.Sprintf("lock:kind%c:{id}", 'a'+i) {
			t.Fatalf("Match(%q) = %q before the cap", key, l)
		}
	}
	cases := []struct{ key, want string }{
		{"lock:kindd:1", OtherLabel},
		{"lock:plain", OtherLabel},
		{"lock:kinda:999", "lock:kinda:{id}"}, // seen before the cap
		{"lock:kindc:5", "lock:kindc:{id}"},
		{"lock:quota:7", "lock:quota:{m}"}, // declared patterns do not count
	}
	for _, c := range cases {
		if l, _ := m.Match(c.key); l != c.want {
			t.Errorf("Match(%q) = %q after the cap, want %q", c.key, l, c.want)
		}
	}
}

func TestMatch_InvalidUTF8IsOther(t *testing.T) {
	m := NewMatcher(Default())
	if l, _ := m.Match("lock:\xff\xfe:1"); l != OtherLabel {
		t.Errorf("Match(invalid UTF-8) = %q, want other", l)
	}
}

func TestMatch_ConcurrentUseIsRaceFreeAndBoundedAndStable(t *testing.T) {
	p := policyWith("lock:quota:{m}")
	p.MaxPatterns = 50
	m := NewMatcher(p)
	const workers = 16
	var (
		mu     sync.Mutex
		labels = map[string]string{} // normalised key family -> label
		wg     sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range 2000 {
				family := "fam" + strconv.Itoa((i*7+w)%100)
				key := "lock:" + family + ":" + strconv.Itoa(i)
				if i%5 == 0 {
					key = "lock:quota:" + strconv.Itoa(i)
					family = "quota"
				}
				label, rule := m.Match(key)
				if rule == nil {
					t.Error("nil rule")
					return
				}
				mu.Lock()
				if prev, ok := labels[family]; ok && prev != label && prev != OtherLabel {
					t.Errorf("family %s moved from %q to %q", family, prev, label)
				}
				labels[family] = label
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	distinct := map[string]bool{}
	for _, l := range labels {
		distinct[l] = true
	}
	// 50 normalised + the declared pattern + "other".
	if len(distinct) > 52 {
		t.Errorf("%d distinct labels, want <= 52", len(distinct))
	}
	if !distinct[OtherLabel] {
		t.Error("100 families with a cap of 50 produced no \"other\"")
	}
}

func TestMatch_SeenKeyDoesNotAllocate(t *testing.T) {
	m := NewMatcher(policyWith("lock:quota:{m}", "lock:stock:{sku}"))
	for _, key := range []string{"lock:quota:42", "lock:order:12345", "lock:inventory:global"} {
		m.Match(key)
		if n := testing.AllocsPerRun(100, func() { m.Match(key) }); n != 0 {
			t.Errorf("Match(%q) allocates %v times for a seen label, want 0", key, n)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	p := policyWith("lock:quota:{merchant_id}", "lock:stock:{sku}:{warehouse}", "lock:report:{name}")
	m := NewMatcher(p)
	for _, bc := range []struct{ name, key string }{
		{"declared", "lock:stock:sku-991:wh3"},
		{"normalised", "lock:order:550e8400-e29b-41d4-a716-446655440000:pay"},
		{"unchanged", "lock:inventory:global"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m.Match(bc.key)
			b.ReportAllocs()
			for b.Loop() {
				m.Match(bc.key)
			}
		})
	}
	b.Run("normalised-parallel", func(b *testing.B) {
		key := "lock:order:12345678:pay"
		m.Match(key)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.Match(key)
			}
		})
	})
}
