package redislock_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestOptions_EachConstructorTakesOnlyWhatApplies checks the typed split: an
// option compiles as an argument of New or NewQuorum exactly when its
// declared result type implements that constructor's option type, so an
// option that does not apply to a mode (Fair over a quorum, a drift factor
// on one node) is a compile error, not silently ignored.
func TestOptions_EachConstructorTakesOnlyWhatApplies(t *testing.T) {
	t.Parallel()
	newType := reflect.TypeFor[redislock.Option]()
	quorumType := reflect.TypeFor[redislock.QuorumOption]()
	for _, tc := range []struct {
		name        string
		ctor        any
		new, quorum bool
	}{
		{"WithService", redislock.WithService, true, true},
		{"WithInstance", redislock.WithInstance, true, true},
		{"WithFenceRetention", redislock.WithFenceRetention, true, true},
		{"WithIdleTimeout", redislock.WithIdleTimeout, true, false},
		{"Fair", redislock.Fair, true, false},
		{"WithWaiterTimeout", redislock.WithWaiterTimeout, true, false},
		{"WithDriftFactor", redislock.WithDriftFactor, false, true},
		{"WithNodeTimeout", redislock.WithNodeTimeout, false, true},
		{"WithReplicaAcks", redislock.WithReplicaAcks, true, false},
	} {
		out := reflect.TypeOf(tc.ctor).Out(0)
		if got := out.Implements(newType); got != tc.new {
			t.Errorf("%s() (%v) accepted by New: %v, want %v", tc.name, out, got, tc.new)
		}
		if got := out.Implements(quorumType); got != tc.quorum {
			t.Errorf("%s() (%v) accepted by NewQuorum: %v, want %v", tc.name, out, got, tc.quorum)
		}
	}
}

// TestNew_RefusesOptionsThatDoNotApplyOrAreOutOfRange covers what the types
// cannot say: a waiter timeout without Fair, and values out of range.
func TestNew_RefusesOptionsThatDoNotApplyOrAreOutOfRange(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	for name, tc := range map[string]struct {
		opts []redislock.Option
		say  string
	}{
		"waiter timeout without Fair": {[]redislock.Option{redislock.WithWaiterTimeout(time.Second)}, "only with Fair"},
		"waiter timeout 1ms":          {[]redislock.Option{redislock.Fair(), redislock.WithWaiterTimeout(time.Millisecond)}, "waiter timeout"},
		"idle timeout 0":              {[]redislock.Option{redislock.WithIdleTimeout(0)}, "idle timeout"},
		"fence retention 0":           {[]redislock.Option{redislock.WithFenceRetention(0)}, "fence retention"},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := redislock.New(c, tc.opts...)
			if err == nil {
				_ = l.Close()
			}
			if !errors.Is(err, instrument.ErrInvalidOption) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("err = %v, want ErrInvalidOption saying %q", err, tc.say)
			}
		})
	}
	if _, err := redislock.New(nil); !errors.Is(err, instrument.ErrInvalidOption) {
		t.Fatalf("New(nil) = %v, want ErrInvalidOption", err)
	}
	l, err := redislock.New(c, redislock.Fair(), redislock.WithWaiterTimeout(time.Second))
	if err != nil {
		t.Fatalf("Fair with a waiter timeout: %v", err)
	}
	_ = l.Close()
}
