package redislock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestWithReplicaAcks_RefusesBadValuesAndClientsWithoutOneConnection
// checks what New refuses of WithReplicaAcks, each error naming the bad
// value: a count below one, a timeout not above zero, a timeout the
// client's read timeout would cut (the WAIT reply is read within it, and
// Redis answers a WAIT that timed out up to a timer tick late: 100ms at
// the default hz 10, so a timeout just under ReadTimeout is cut too), and
// a client that does not send a pipeline to one node on one connection
// (Cluster, Ring), where WAIT would not follow the script.
func TestWithReplicaAcks_RefusesBadValuesAndClientsWithoutOneConnection(t *testing.T) {
	t.Parallel()
	_, c := setup(t) // ReadTimeout 1s
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	for _, tc := range []struct {
		name string
		c    redis.UniversalClient
		opt  redislock.Option
		say  string
	}{
		{"no replica", c, redislock.WithReplicaAcks(0, 100*time.Millisecond), "replica acks 0 must be >= 1"},
		{"negative count", c, redislock.WithReplicaAcks(-2, 100*time.Millisecond), "replica acks -2 must be >= 1"},
		{"zero timeout", c, redislock.WithReplicaAcks(1, 0), "replica ack timeout 0s must be > 0"},
		{"negative timeout", c, redislock.WithReplicaAcks(1, -time.Second), "replica ack timeout -1s must be > 0"},
		{"timeout at the read timeout", c, redislock.WithReplicaAcks(1, time.Second), "replica ack timeout 1s must be"},
		{"timeout just under the read timeout", c, redislock.WithReplicaAcks(1, 999*time.Millisecond), "replica ack timeout 999ms must be at most 750ms"},
		{"timeout inside the reply margin", c, redislock.WithReplicaAcks(1, 751*time.Millisecond), "replica ack timeout 751ms must be at most 750ms"},
		{"cluster", cluster, redislock.WithReplicaAcks(1, 100*time.Millisecond), "*redis.ClusterClient"},
		{"ring", ring, redislock.WithReplicaAcks(1, 100*time.Millisecond), "*redis.Ring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := redislock.New(tc.c, tc.opt)
			if err == nil {
				_ = l.Close()
			}
			if !errors.Is(err, instrument.ErrInvalidOption) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("err = %v, want ErrInvalidOption saying %q", err, tc.say)
			}
		})
	}
	for _, opts := range [][]redislock.Option{
		{redislock.WithReplicaAcks(1, 100*time.Millisecond)},
		{redislock.Fair(), redislock.WithReplicaAcks(2, 500*time.Millisecond)},
		{redislock.WithReplicaAcks(1, 750*time.Millisecond)}, // ReadTimeout less the reply margin
	} {
		l, err := redislock.New(c, opts...)
		if err != nil {
			t.Fatalf("valid replica acks refused: %v", err)
		}
		_ = l.Close()
	}
}
