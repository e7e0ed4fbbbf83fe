package etcdlock_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/lockgov/lockgov/instrument/etcdlock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newLocker(t testing.TB, c *clientv3.Client, opts ...etcdlock.Option) *etcdlock.Locker {
	t.Helper()
	l, err := etcdlock.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
