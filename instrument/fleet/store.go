package fleet

import (
	"context"
	"errors"
	"time"
)

// Store is what the publisher needs from one lock store. The backends
// implement it (see redisstore and etcdstore); a Locker that knows its
// store says so with a FleetStore() Store method, which instrument.Govern
// looks for.
type Store interface {
	// ID identifies the store the way an operator would: two Stores with one
	// ID (two clients of one Redis, a Locker and a WorkerID registry on one
	// etcd) share one heartbeat.
	ID() string
	// Backend names the store kind: "redis" or "etcd".
	Backend() string
	// Put writes this instance's heartbeat under a TTL of ttl.
	Put(ctx context.Context, instance string, value []byte, ttl time.Duration) error
	// Delete removes this instance's heartbeat.
	Delete(ctx context.Context, instance string) error
	// Time reads the store's clock. Stores without one (etcd) return
	// ErrNoStoreTime.
	Time(ctx context.Context) (time.Time, error)
	// TierReport reads the tier an agent measured for instance and wrote
	// back (see TierReport); nil and no error when there is none.
	TierReport(ctx context.Context, instance string) ([]byte, error)
}

// ErrNoStoreTime is returned by Store.Time when the store exposes no clock.
var ErrNoStoreTime = errors.New("fleet: the store exposes no clock")

// Swapper is a Store that writes a heartbeat and returns the value it
// replaced (nil when there was none), in one round trip: Redis SET ... GET,
// an etcd Put with its previous key-value. The publisher uses it instead of
// Put when a store has it: the value it replaced says whether another
// publisher wrote the key since its last beat, one of this process (the
// same store reached under two IDs: their beats then list what both
// track) or of another process configured with this instance name (logged).
type Swapper interface {
	Swap(ctx context.Context, instance string, value []byte, ttl time.Duration) (prev []byte, err error)
}
