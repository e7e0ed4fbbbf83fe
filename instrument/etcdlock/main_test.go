package etcdlock_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument/etcdlock"

	"github.com/lockgov/lockgov/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

func newLocker(t testing.TB, c *clientv3.Client, opts ...etcdlock.Option) *etcdlock.Locker {
	t.Helper()
	l, err := etcdlock.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitModes are the ways a waiter waits for its turn: watching the whole
// queue (the default while few entries are ahead of it) or its predecessor
// only (longer queues). max is the Locker's headWatchMax, -1 for the
// default; "mixed" puts the waiters with at most 3 entries ahead on the
// first and the others on the second, side by side.
var waitModes = []struct {
	name string
	max  int64
}{{"queue-watch", -1}, {"predecessor-watch", 0}, {"mixed", 3}}

// inWaitMode sets l's wait mode (see waitModes) and returns l.
func inWaitMode(l *etcdlock.Locker, max int64) *etcdlock.Locker {
	if max >= 0 {
		etcdlock.SetHeadWatchMax(l, max)
	}
	return l
}
