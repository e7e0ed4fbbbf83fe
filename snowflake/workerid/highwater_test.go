package workerid_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// aheadClock is a wall clock running ahead of the system clock by d.
type aheadClock struct{ d time.Duration }

func (c aheadClock) Wall() time.Time   { return time.Now().Add(c.d) }
func (aheadClock) Mono() time.Duration { return snowflake.SystemClock{}.Mono() }

// TestEtcdRenewal_NeverLowersHighWaterMark: holder A's clock runs an hour ahead, so its
// reservation is an hour ahead. A crashes; B (correct clock) takes the slot with A's mark
// as its floor. B's renewals must not lower the stored mark to B's now+TTL: if B then
// crashes too, C would start inside A's range.
func TestEtcdRenewal_NeverLowersHighWaterMark(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	ec := e.Client(t)
	ctx := ctxT(t, 30*time.Second)
	hw := func() int64 {
		resp, err := ec.Get(ctx, "lockgov:workerid:{8}:hw")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("high-water key: %v (%d keys)", err, len(resp.Kvs))
		}
		n, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// holder returns a Registry for pod auth-8 on a client of its own, and a func that
	// closes that client, as a crashed process would.
	holder := func(podIP string, opts ...workerid.Option) (*workerid.Registry, func()) {
		c, err := etcdClient(e.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		reg, err := workerid.NewEtcd(c, append([]workerid.Option{workerid.WithTTL(testTTL), workerid.WithIdentity("auth-8", podIP)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return reg, func() { _ = c.Close() }
	}

	regA, crashA := holder("a", workerid.WithClock(aheadClock{time.Hour}))
	a := claim(t, regA, "auth")
	markA := a.State().LimitUnixMilli
	if got := hw(); got != markA {
		t.Fatalf("stored mark %d, A reserved %d", got, markA)
	}
	crashA()

	regB, crashB := holder("b")
	b := claimEventually(t, regB, "auth", 3*testTTL)
	if f := b.State().FloorUnixMilli; f < markA {
		t.Fatalf("B's floor %d is below A's reservation %d", f, markA)
	}
	e0 := b.ExpiresAt()
	testenv.WaitFor(t, 3*testTTL, "B's first renewal", func() bool { return b.ExpiresAt().After(e0) })
	if got := hw(); got < markA {
		t.Fatalf("B's renewal lowered the high-water mark from A's %d to %d (%s below)", markA, got, time.Duration(markA-got)*time.Millisecond)
	}
	crashB()

	regC, _ := holder("c")
	c := claimEventually(t, regC, "auth", 3*testTTL)
	if f := c.State().FloorUnixMilli; f < markA {
		t.Fatalf("C's floor %d is inside A's range (A reserved up to %d)", f, markA)
	}
}
