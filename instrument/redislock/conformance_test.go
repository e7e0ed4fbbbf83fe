package redislock_test

import (
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/locktest"
)

func TestConformance_SingleNode(t *testing.T) {
	// locktest.Run checks goroutines against a goleak.IgnoreCurrent snapshot:
	// nothing else may run in its process.
	if inOwnProcess(t) {
		return
	}
	r, admin := setup(t)
	locktest.Run(t,
		func(t *testing.T) instrument.Locker {
			return newLocker(t, newClient(t, r.Addr()))
		},
		locktest.WithExpiryTTL(300*time.Millisecond),
		locktest.WithLoser(deleter(admin)),
	)
}
