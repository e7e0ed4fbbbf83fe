package quota_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_NoAcknowledgedDeductionIsLostInAFailoverMidFlight: four
// goroutines deduct 1 unit each under fresh request ids with
// WithReplicaAcks(1, ...) while the replica is stopped and resumed over and
// over (SIGSTOP/SIGCONT, random spans) and the replication link delays every
// chunk by 20 ms. Once 40 deductions have succeeded, with calls still in
// flight, the link is closed (in-flight chunks dropped), the primary killed
// and the replica promoted. Every deduction that returned nil must be on
// the promoted replica: its retry there replays the first answer (not a
// new deduction), and the promoted balance is the stock less the
// deductions it has records of. A deduction that returned
// ErrNotReplicated may or may not be there. Without the WAIT (the option
// ignored), deductions returned during a stop or in the link's last 20 ms
// are not on the replica, and their retries deduct again.
func TestReplicaAcks_NoAcknowledgedDeductionIsLostInAFailoverMidFlight(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := testenv.NewReplicated(t)
	const key, stock = "stock:sku-flap", 100_000
	if err := newQuota(t, testenv.NewRedisClient(t, rp.Primary.Addr())).Set(ctx, key, stock); err != nil {
		t.Fatal(err)
	}
	rp.CaughtUp(t)
	q := newQuota(t, testenv.NewRedisClient(t, rp.Primary.Addr()), quota.WithReplicaAcks(1, 300*time.Millisecond))
	done := replicaacktest.MidFlight(t, ctx, rp, "order", quota.ErrNotReplicated, func(ctx context.Context, id string) error {
		_, err := q.Deduct(ctx, key, 1, id)
		return err
	})
	if t.Failed() {
		return
	}
	promoted := newQuota(t, replicaacktest.FailOver(t, rp))

	left, err := promoted.Remaining(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range done {
		if _, err := promoted.Deduct(ctx, key, 1, id); err != nil {
			t.Fatalf("the retry of acknowledged %s on the promoted replica: %v", id, err)
		}
	}
	if after, err := promoted.Remaining(ctx, key); err != nil || after != left {
		t.Fatalf("retrying the %d acknowledged deductions on the promoted replica took %d units, %v: %d of them were lost in the failover", len(done), left-after, err, left-after)
	}
	if taken := stock - left; taken < int64(len(done)) {
		t.Fatalf("the promoted replica has %d units taken, fewer than the %d acknowledged", taken, len(done))
	}
}
