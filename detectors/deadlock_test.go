package detectors_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/fleet"
)

// TestDeadlock_TwoInstancesWaitingForEachOther: a holds X and waits for Y,
// b holds Y and waits for X, published as heartbeats on a real store:
// exactly one deadlock finding, naming both instances and both keys, on
// every call while it lasts; with and without the per-goroutine holds.
func TestDeadlock_TwoInstancesWaitingForEachOther(t *testing.T) {
	t.Parallel()
	for _, precise := range []bool{true, false} {
		name := "instance-level"
		if precise {
			name = "holds-while-waiting"
		}
		t.Run(name, func(t *testing.T) {
			ctx := timeout(t, time.Minute)
			for _, store := range []string{"redis", "etcd"} {
				var s detectors.Store
				var c any
				if store == "redis" {
					rc := newRedis(t)
					s, c = redisStore(t, rc), rc
				} else {
					ec := newEtcd(t)
					s, c = etcdStore(t, ec), ec
				}
				since := time.Now().Add(-time.Minute)
				a, b := otherBeat("pod-a", 10), otherBeat("pod-b", 20)
				a.Held = []fleet.HeldLock{{Key: "lock:x", Pattern: "lock:x", Backend: store, Since: since}}
				b.Held = []fleet.HeldLock{{Key: "lock:y", Pattern: "lock:y", Backend: store, Since: since}}
				a.Waiting = []fleet.WaitingLock{{Key: "lock:y", Pattern: "lock:y", Backend: store, Since: since}}
				b.Waiting = []fleet.WaitingLock{{Key: "lock:x", Pattern: "lock:x", Backend: store, Since: since}}
				if precise {
					a.Waiting[0].HoldsWhileWaiting = []string{"lock:x"}
					b.Waiting[0].HoldsWhileWaiting = []string{"lock:y"}
				}
				// A bystander waiting for x, holding nothing: not part of the cycle.
				c3 := otherBeat("pod-c", 30)
				c3.Waiting = []fleet.WaitingLock{{Key: "lock:x", Backend: store, Since: since}}
				for _, hb := range []*fleet.Heartbeat{a, b, c3} {
					putBeat(t, ctx, c, hb)
				}
				d, err := detectors.NewDeadlock(s)
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					fs := detect(t, ctx, d)
					dl := 0
					for _, f := range fs {
						if f.Kind != detectors.KindDeadlock {
							continue
						}
						dl++
						for _, want := range []string{"pod-a", "pod-b", "lock:x", "lock:y"} {
							if !strings.Contains(f.Detail, want) {
								t.Errorf("%s: deadlock detail does not name %s: %s", store, want, f.Detail)
							}
						}
						if strings.Contains(f.Detail, "pod-c") {
							t.Errorf("%s: bystander in the cycle: %s", store, f.Detail)
						}
						if f.Severity != detectors.SeverityCritical || f.Age < time.Minute {
							t.Errorf("%s: severity %s age %s", store, f.Severity, f.Age)
						}
					}
					if dl != 1 {
						t.Fatalf("%s: %d deadlock findings, want 1:%s", store, dl, describe(fs))
					}
					if precise && len(fs) != 1 {
						t.Fatalf("%s: the deadlock's own order pair was also reported:%s", store, describe(fs))
					}
				}
			}
		})
	}
}

// TestDeadlock_NoCycleWhenTheHolderIsNotWaiting: a waits for y, b holds y
// and is not waiting: no deadlock.
func TestDeadlock_NoCycleWhenTheHolderIsNotWaiting(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := newRedis(t)
	a, b := otherBeat("pod-a", 10), otherBeat("pod-b", 20)
	a.Held = []fleet.HeldLock{{Key: "lock:x"}}
	a.Waiting = []fleet.WaitingLock{{Key: "lock:y", HoldsWhileWaiting: []string{"lock:x"}}}
	b.Held = []fleet.HeldLock{{Key: "lock:y"}}
	b.Waiting = []fleet.WaitingLock{{Key: "lock:z", HoldsWhileWaiting: []string{"lock:w"}}}
	putBeat(t, ctx, c, a)
	putBeat(t, ctx, c, b)
	d, err := detectors.NewDeadlock(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if fs := detect(t, ctx, d); len(fs) != 0 {
		t.Fatalf("findings:%s", describe(fs))
	}
}

// TestDeadlock_LockOrderInversionSeenOverTime: a takes x then waits for y;
// later (a is done) b takes y then waits for x. Never a cycle at one time,
// but the two orders can deadlock: one lock_order_inversion.
func TestDeadlock_LockOrderInversionSeenOverTime(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := newRedis(t)
	d, err := detectors.NewDeadlock(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	a := otherBeat("pod-a", 10)
	a.Held = []fleet.HeldLock{{Key: "lock:x"}}
	a.Waiting = []fleet.WaitingLock{{Key: "lock:y", HoldsWhileWaiting: []string{"lock:x"}}}
	putBeat(t, ctx, c, a)
	if fs := detect(t, ctx, d); len(fs) != 0 {
		t.Fatalf("one order alone:%s", describe(fs))
	}
	a.Held, a.Waiting = nil, nil
	putBeat(t, ctx, c, a)
	b := otherBeat("pod-b", 20)
	b.Held = []fleet.HeldLock{{Key: "lock:y"}}
	b.Waiting = []fleet.WaitingLock{{Key: "lock:x", HoldsWhileWaiting: []string{"lock:y"}}}
	putBeat(t, ctx, c, b)
	fs := detect(t, ctx, d)
	if len(fs) != 1 || fs[0].Kind != detectors.KindLockOrderInversion || fs[0].Severity != detectors.SeverityWarning {
		t.Fatalf("want one lock_order_inversion:%s", describe(fs))
	}
	for _, want := range []string{"pod-a", "pod-b", "lock:x", "lock:y"} {
		if !strings.Contains(fs[0].Detail, want) {
			t.Errorf("detail does not name %s: %s", want, fs[0].Detail)
		}
	}
}

// TestDeadlock_WaitsThatDidNotCoexistAreNotACycle: a's beat (sent at t0)
// shows a waiting for y; b started waiting for x after t0, so a's wait may
// have ended before b's began: no deadlock until a's next beat shows a
// still waiting, which makes it one.
func TestDeadlock_WaitsThatDidNotCoexistAreNotACycle(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := newRedis(t)
	t0 := time.Now().Add(-time.Minute)
	a, b := otherBeat("pod-a", 10), otherBeat("pod-b", 20)
	a.SentAt = t0
	a.Held = []fleet.HeldLock{{Key: "lock:x", Since: t0.Add(-time.Minute)}}
	a.Waiting = []fleet.WaitingLock{{Key: "lock:y", Since: t0.Add(-time.Minute), HoldsWhileWaiting: []string{"lock:x"}}}
	b.SentAt = t0.Add(10 * time.Second)
	b.Held = []fleet.HeldLock{{Key: "lock:y", Since: t0.Add(time.Second)}}
	b.Waiting = []fleet.WaitingLock{{Key: "lock:x", Since: t0.Add(2 * time.Second), HoldsWhileWaiting: []string{"lock:y"}}}
	putBeat(t, ctx, c, a)
	putBeat(t, ctx, c, b)
	d, err := detectors.NewDeadlock(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if fs := detect(t, ctx, d); len(fs) != 0 {
		t.Fatalf("waits that may not have coexisted:%s", describe(fs))
	}
	a.SentAt = t0.Add(20 * time.Second)
	putBeat(t, ctx, c, a)
	fs := detect(t, ctx, d)
	if len(fs) != 1 || fs[0].Kind != detectors.KindDeadlock {
		t.Fatalf("want one deadlock:%s", describe(fs))
	}
}

// TestDeadlock_SameKeysInTwoDeploymentsAreTwoLocks: x works on Redis 1,
// y on Redis 2; x holds lock:a and waits for lock:b, y holds lock:b and
// waits for lock:a, each in its own deployment. Same names, different
// locks: no deadlock and no lock-order inversion (on repeated calls, so
// the remembered orders meet too). The same beats in one store are a
// deadlock; and one instance waiting in one deployment while holding a
// lock in the other still closes a cycle across the two.
func TestDeadlock_SameKeysInTwoDeploymentsAreTwoLocks(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c1, c2, c3 := newRedis(t), newRedis(t), newRedis(t)
	s1, s2, s3 := redisStore(t, c1), redisStore(t, c2), redisStore(t, c3)
	since := time.Now().Add(-time.Minute)
	x, y := otherBeat("x", 10), otherBeat("y", 20)
	x.Held = []fleet.HeldLock{{Key: "lock:a", Pattern: "lock:a", Backend: "redis", Since: since}}
	x.Waiting = []fleet.WaitingLock{{Key: "lock:b", Pattern: "lock:b", Backend: "redis", Since: since, HoldsWhileWaiting: []string{"lock:a"}}}
	y.Held = []fleet.HeldLock{{Key: "lock:b", Pattern: "lock:b", Backend: "redis", Since: since}}
	y.Waiting = []fleet.WaitingLock{{Key: "lock:a", Pattern: "lock:a", Backend: "redis", Since: since, HoldsWhileWaiting: []string{"lock:b"}}}
	putBeat(t, ctx, c1, x)
	putBeat(t, ctx, c2, y)
	d, err := detectors.NewDeadlock(s1, detectors.WithHeartbeatsFrom(s2))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if fs := detect(t, ctx, d); len(fs) != 0 {
			t.Fatalf("locks of two deployments met:%s", describe(fs))
		}
	}

	// Control: the same two beats in one store are a deadlock.
	putBeat(t, ctx, c3, x)
	putBeat(t, ctx, c3, y)
	one, err := detectors.NewDeadlock(s3)
	if err != nil {
		t.Fatal(err)
	}
	if fs := detect(t, ctx, one); len(fs) != 1 || fs[0].Kind != detectors.KindDeadlock {
		t.Fatalf("one store: want one deadlock:%s", describe(fs))
	}

	// Across the deployments for real: p holds lock:a on Redis 1 and waits
	// for lock:b on Redis 2, q holds lock:b on Redis 2 and waits for lock:a
	// on Redis 1. Each instance's beat in a store lists what it holds or
	// waits for there.
	p1, p2, q1, q2 := otherBeat("p", 30), otherBeat("p", 30), otherBeat("q", 40), otherBeat("q", 40)
	p1.Held = x.Held
	p2.Waiting = x.Waiting
	q2.Held = y.Held
	q1.Waiting = y.Waiting
	delBeat(t, ctx, c1, "x")
	delBeat(t, ctx, c2, "y")
	putBeat(t, ctx, c1, p1)
	putBeat(t, ctx, c2, p2)
	putBeat(t, ctx, c1, q1)
	putBeat(t, ctx, c2, q2)
	across, err := detectors.NewDeadlock(s1, detectors.WithHeartbeatsFrom(s2))
	if err != nil {
		t.Fatal(err)
	}
	if fs := detect(t, ctx, across); len(fs) != 1 || fs[0].Kind != detectors.KindDeadlock {
		t.Fatalf("a cycle across two deployments: want one deadlock:%s", describe(fs))
	}
}
