package lockversion_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/lockversion"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestRedis_IsWhatRedisSha1hexComputesInAScript holds the documented form
// of a Redis lock's version: a script (or an operator's EVAL) computes the
// same version from the value, whatever its bytes.
func TestRedis_IsWhatRedisSha1hexComputesInAScript(t *testing.T) {
	c := testenv.NewRedis(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range []string{"", "tok 7 {\"service\":\"billing\"}", "\x00\xff\xfe not UTF-8"} {
		got, err := c.Eval(ctx, "return redis.sha1hex(ARGV[1])", nil, v).Text()
		if err != nil {
			t.Fatal(err)
		}
		if want := lockversion.Redis(v); got != want || !lockversion.ValidRedis(want) {
			t.Errorf("%q: redis.sha1hex %s, lockversion.Redis %s (valid: %v)", v, got, want, lockversion.ValidRedis(want))
		}
	}
}

// TestValid_AcceptsOnlyTheFormsTheStoresGive: a version is compared as a
// string, so a form no store gives (upper case, a sign, a leading zero)
// would never match; the agent refuses it (400) instead of answering 412.
func TestValid_AcceptsOnlyTheFormsTheStoresGive(t *testing.T) {
	for _, tc := range []struct {
		v           string
		redis, etcd bool
	}{
		{lockversion.Redis("x"), true, false},
		{lockversion.Etcd(42), false, true},
		{lockversion.Etcd(1 << 62), false, true},
		{"11f6ad8ec52a2984abaafd7c3b516503785c2072", true, false},
		{"11F6AD8EC52A2984ABAAFD7C3B516503785C2072", false, false},
		{"11f6ad8ec52a2984abaafd7c3b516503785c207", false, false},
		{"0", false, false},
		{"-5", false, false},
		{"+5", false, false},
		{"05", false, false},
		{"99999999999999999999", false, false},
		{"", false, false},
	} {
		if r, e := lockversion.ValidRedis(tc.v), lockversion.ValidEtcd(tc.v); r != tc.redis || e != tc.etcd {
			t.Errorf("%q: valid on Redis %v, on etcd %v; want %v, %v", tc.v, r, e, tc.redis, tc.etcd)
		}
	}
}
