package workerid_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

func ExampleNewRedis() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	// The auth service owns WorkerIDs 0-99; pod auth-7 prefers 7.
	reg, err := workerid.NewRedis(rdb, workerid.WithServiceRange("auth", 0, 99))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := reg.Claim(ctx, "auth")
	var ce *workerid.CollisionError
	if errors.As(err, &ce) {
		log.Fatalf("worker id %d is held by %s (pid %d)", ce.WorkerID, ce.Holder.Hostname, ce.Holder.PID)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background()) // persists the last millisecond used
	gen, err := snowflake.New(lease.WorkerID(), snowflake.WithLease(lease))
	if err != nil {
		log.Fatal(err)
	}
	id, err := gen.NextID(ctx) // snowflake.ErrWorkerLeaseLost once the lease may have expired
	if err != nil {
		log.Fatal(err)
	}
	log.Println(id)
}

// A service whose IDs count from another epoch than snowflake's default (or use another
// layout) builds its Registry and its generator with the same values: the Registry records
// that ID space with each slot it claims and is refused a slot recorded under another
// (ErrSpaceMismatch), and snowflake.New refuses a generator of another epoch or layout on
// its leases.
func ExampleWithEpoch() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	layout := snowflake.Layout8x13
	reg, err := workerid.NewRedis(rdb, workerid.WithServiceRange("auth", 0, 99),
		workerid.WithEpoch(epoch), workerid.WithLayout(layout))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := reg.Claim(ctx, "auth")
	if errors.Is(err, workerid.ErrSpaceMismatch) {
		// The slot's IDs were issued under another epoch or layout: this one's would repeat them.
		log.Fatal(err)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
	gen, err := snowflake.New(lease.WorkerID(), snowflake.WithLease(lease),
		snowflake.WithEpoch(epoch), snowflake.WithLayout(layout))
	if err != nil {
		log.Fatal(err)
	}
	id, err := gen.NextID(ctx)
	if err != nil {
		log.Fatal(err)
	}
	log.Println(id)
}

// WorkerIDs that survive a failover to a replica: a claim or renewal counts only once one
// replica has it, so a claimant on a promoted replica never gets this WorkerID while the
// generator still issues, nor a floor below its IDs. A claim too few replicas acknowledged
// was released: claim again. (Not run: it needs a Sentinel deployment.)
func ExampleWithReplicaAcks() {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "ids",
		SentinelAddrs: []string{"sentinel-0:26379", "sentinel-1:26379", "sentinel-2:26379"},
		ReadTimeout:   3 * time.Second, // at least the ack timeout + 250ms
	})
	defer rdb.Close()
	// The ack timeout is at most TTL/3 - 250ms: a renewal ends within TTL/3.
	reg, err := workerid.NewRedis(rdb, workerid.WithTTL(10*time.Second), workerid.WithReplicaAcks(1, time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := reg.Claim(ctx, "auth")
	var nr *workerid.NotReplicatedError
	switch {
	case errors.As(err, &nr):
		log.Fatalf("on %d of %d replicas within %v: claim again", nr.Acked, nr.Wanted, nr.Timeout)
	case err != nil:
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
	// The generator stops at the last acknowledged renewal's ValidUntil while no replica answers.
	gen, err := snowflake.New(lease.WorkerID(), snowflake.WithLease(lease))
	if err != nil {
		log.Fatal(err)
	}
	log.Println(gen.NextID(ctx))
}
