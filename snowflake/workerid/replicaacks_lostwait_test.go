package workerid_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// lostWaitTTL is the lease TTL of the lost-WAIT tests: their WAIT timeout (2s, at most
// TTL/3 less 250ms) leaves KillBlockedIn time to find the WAIT blocked on a loaded machine.
const lostWaitTTL = 9 * time.Second

// lostWaitRegistry is ackedRegistry on a client of rp's primary with the options set
// changes (retries), TTL lostWaitTTL and a 2s WAIT, with the package's scripts and
// replicaack's touch loaded: each claim and renewal the tests break is one pipeline of
// EVALSHAs, whose WAIT is the one KillBlockedIn kills.
func lostWaitRegistry(t *testing.T, rp *testenv.Replicated, set func(o *redis.Options)) (*workerid.Registry, *redis.Client, int64) {
	t.Helper()
	c := replicaacktest.ClientWith(t, rp.Primary.Addr(), set)
	loadScripts(t, c)
	touch, err := os.ReadFile("../../internal/replicaack/touch.lua")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptLoad(ctxT(t, time.Minute), string(touch)).Err(); err != nil {
		t.Fatal(err)
	}
	return ackedRegistryOn(t, rp, c, lostWaitTTL, 2*time.Second)
}

// TestReplicaAcks_AClaimWhoseWaitReplyIsLostIsReleasedAndIsNotReplicated: with the only
// replica stopped, a Claim's script runs on the primary and answers, and its connection is
// killed while WAIT blocks (with retries off; or with one retry, whose resent pipeline is
// killed alike). go-redis stamps the WAIT's EOF on the script it had heard. The claim took
// the slot all the same: it must be released (owner-checked, the mark put back) and the
// Claim must say ErrNotReplicated, not a store failure; once the replica is back the same
// Registry claims the slot from the same floor, not colliding with its own claim.
func TestReplicaAcks_AClaimWhoseWaitReplyIsLostIsReleasedAndIsNotReplicated(t *testing.T) {
	t.Parallel()
	for _, tc := range replicaacktest.LostWaits {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			rp := testenv.NewReplicated(t)
			reg, cp, mark := lostWaitRegistry(t, rp, tc.Set)
			ctx := ctxT(t, time.Minute)
			resume := rp.PauseReplica(t)
			errc := make(chan error, 1)
			go func() {
				l, err := reg.Claim(ctxT(t, 30*time.Second), "auth")
				if err == nil {
					_ = l.Release(ctx)
				}
				errc <- err
			}()
			for range tc.Kills {
				rp.Primary.KillBlockedIn(t, "wait")
			}
			if err := <-errc; !errors.Is(err, workerid.ErrNotReplicated) {
				t.Errorf("Claim whose WAIT reply was lost = %v; want ErrNotReplicated", err)
			}
			releasedThenClaimed(t, rp, reg, cp, mark, resume)
		})
	}
}

// TestReplicaAcks_ARenewalWhoseWaitReplyIsLostIsAFailedOne: A holds WorkerID 6, the only
// replica is stopped, and the connection of A's renewal is killed while its WAIT blocks:
// the renewal script ran and answered (go-redis stamps the WAIT's EOF on it). It is a
// failed renewal all the same: the lease's expiry and reservation stay those of the claim
// (checked once the retry's WAIT blocks, so the first renewal has been decided), the lease
// goes on, and once the replica is back a renewal gets through.
func TestReplicaAcks_ARenewalWhoseWaitReplyIsLostIsAFailedOne(t *testing.T) {
	t.Parallel()
	rp := testenv.NewReplicated(t)
	reg, _, _ := lostWaitRegistry(t, rp, func(o *redis.Options) { o.MaxRetries = -1 })
	ctx := ctxT(t, time.Minute)
	a := claim(t, reg, "auth")
	acked, expires := a.State(), a.ExpiresAt()
	resume := rp.PauseReplica(t)
	rp.Primary.KillBlockedIn(t, "wait") // the first renewal's
	rp.Primary.KillBlockedIn(t, "wait") // its retry's: the first has been decided
	if now := a.State(); !a.ExpiresAt().Equal(expires) || now.LimitUnixMilli != acked.LimitUnixMilli {
		t.Errorf("a renewal whose WAIT reply was lost moved the lease: expiry %v -> %v, reservation %d -> %d",
			expires, a.ExpiresAt(), acked.LimitUnixMilli, now.LimitUnixMilli)
	}
	if err := a.Err(); err != nil {
		t.Errorf("A's lease ended with %v; want it retrying", err)
	}
	resume()
	rp.CaughtUp(t)
	testenv.WaitFor(t, 3*lostWaitTTL, "an acknowledged renewal after the replica came back", func() bool {
		return a.ExpiresAt().After(expires)
	})
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
