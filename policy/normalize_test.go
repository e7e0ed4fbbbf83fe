package policy

import "testing"

func TestNormalize_ReplacesIDLikeSegments(t *testing.T) {
	cases := []struct{ key, want string }{
		{"lock:order:12345", "lock:order:{id}"},
		{"lock:user:550e8400-e29b-41d4-a716-446655440000:profile", "lock:user:{id}:profile"},
		{"lock:user:550E8400E29B41D4A716446655440000", "lock:user:{id}"}, // UUID without dashes
		{"lock:user:abcdefabcdefabcdefabcdefabcdefab", "lock:user:{id}"}, // 32 hex, no digit: still a UUID
		{"lock:quota:{42}", "lock:quota:{id}"},                           // hash tag content
		{"{42}:quota", "{id}:quota"},
		{"lock:{order:123}", "lock:{order:{id}}"},
		{"cache/obj/9f86d081884c7d65", "cache/obj/{id}"},                 // hex >= 8 with a digit
		{"cache/obj/deadbeef", "cache/obj/deadbeef"},                     // hex but no digit: a word
		{"cache/obj/abc123", "cache/obj/abc123"},                         // hex with digit but < 8
		{"tok=01HZX3K5Q8M7N2P4R6T8V0W2Y4", "tok={id}"},                   // >= 16 alnum, mixed
		{"tok=ABCDEFGHIJKLMNOPQRSTUVWX", "tok=ABCDEFGHIJKLMNOPQRSTUVWX"}, // letters only
		{"svc.payment_service_v2_backend", "svc.payment_service_v2_backend"},
		{"a|1#2.3/4=5", "a|{id}#{id}.{id}/{id}={id}"},
		{"lock:order:{id}", "lock:order:{id}"}, // idempotent
		{"lock:v2:shard", "lock:v2:shard"},
		{"lock::7:", "lock::{id}:"},
		{"", ""},
		{"12345", "{id}"},
		{"order-12345", "order-12345"}, // only whole segments are replaced
	}
	for _, c := range cases {
		if got := Normalize(c.key); got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.key, got, c.want)
		}
		if again := Normalize(c.want); again != c.want {
			t.Errorf("Normalize is not idempotent on %q: %q", c.want, again)
		}
	}
}

func TestNormalize_LongKeysBeyondStackBuffer(t *testing.T) {
	key := ""
	want := ""
	for range 100 {
		key += "seg:123:"
		want += "seg:{id}:"
	}
	if got := Normalize(key); got != want {
		t.Errorf("Normalize(long) = %q, want %q", got, want)
	}
}

func TestNormalize_UnchangedKeyDoesNotAllocate(t *testing.T) {
	key := "lock:inventory:global"
	if n := testing.AllocsPerRun(100, func() { _ = Normalize(key) }); n != 0 {
		t.Errorf("Normalize(unchanged) allocates %v times, want 0", n)
	}
}
