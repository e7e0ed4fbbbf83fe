package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/lockvalue"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestJepsen_ExclusionUnderRandomCancellation: several Lockers, several
// goroutines each, random deadlines and cancellations while waiting; at most
// one holder at a time, fences increase holder to holder, no lease is lost,
// no Acquire returns long after its deadline, and nothing is left held.
func TestJepsen_ExclusionUnderRandomCancellation(t *testing.T) {
	// Serial, subtests too: Acquire must return within 1s of its deadline, which
	// overran by up to 2.9s with parallel tests beside it on a loaded 2-core machine.
	for _, m := range modes {
		for _, chaos := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/chaos=%v", m.name, chaos), func(t *testing.T) {
				r, admin := setup(t)
				j := jepsen{
					admin: admin,
					key:   "lock:jepsen",
					run:   5 * time.Second,
					// An Acquire returns by its deadline (the timeout rule),
					// give or take the scheduling of a loaded 2-core
					// machine: a redial under the notifier's lock once cost
					// 4.9 s.
					maxOverrun: time.Second,
				}
				for i := range 3 {
					j.lockers = append(j.lockers, newLocker(t, newClient(t, r.Addr()), append(m.opts, redislock.WithInstance(fmt.Sprint(i)))...))
				}
				if chaos {
					j.fault = func() {
						time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
						_ = admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err()
					}
				}
				j.check(t)
			})
		}
	}
}

// TestJepsen_ExclusionUnderHalfOpenConnections is the workload of
// TestJepsen_ExclusionUnderRandomCancellation with each Locker's client
// dialling through a proxy of its own, one of which, every 300-1500 ms,
// makes every connection it carries half-open (HalfOpen: everything
// dropped, nothing closed, as a NAT or a partition that lost the flow):
// the Locker's pub/sub connection, which only its health check finds and
// replaces (every 500 ms here instead of 2 s, so that a run of a few
// seconds replaces several), and the client's pooled connections, on which
// calls hang until their deadline or the client's read timeout. One
// Acquire in eight waits long (1-3 s, polling every 30 s; in Fair mode,
// under a 30 s waiter timeout, that is a retry every 10 s), so that a
// handoff it misses on a half-open pub/sub connection reaches it only
// through the replacement's wake-up, or through its give-up and
// leave.lua.
//
// Exclusion and fence order must hold whatever the timing. What the fault
// may legitimately cost, counted and logged rather than failed:
//   - an Acquire or a Release that fails with a network timeout (go-redis
//     tried a half-open pooled connection, and again on another one that
//     was half-open too). The lock of a failed Release expires at its TTL;
//     one that an attempt whose reply was lost took is handed on by the
//     failed Acquire's leave if it had queued (always in Fair mode), and
//     otherwise expires too: such locks may still be held at the end.
//   - a lease granted with less than half a second of its TTL left: it
//     counts from when its last attempt was sent, which may have waited out
//     two read timeouts, and a pipeline's queue before them. Its holder
//     stays out of the critical section. A lease that entered has at
//     least half a second left and is held 3 ms at most: its renewal
//     failing for want of Redis cannot end it (only expiry, or a renewal
//     proving the lock gone), so no such lease may be lost.
func TestJepsen_ExclusionUnderHalfOpenConnections(t *testing.T) {
	// Serial, subtests too: Acquire must return within 1s of its deadline, which
	// overran by up to 2.9s with parallel tests beside it on a loaded 2-core machine.
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r, admin := setup(t)
			j := jepsen{
				admin: admin,
				key:   "lock:jepsen-half-open",
				run:   4 * time.Second,
				// A call waits for its own command at most until its
				// deadline, but one whose command went out in a pipeline
				// with others' waits for the pipeline, which runs under
				// the latest deadline of its calls (a Release's 5 s): on a
				// half-open pooled connection that is the client's read
				// timeout (1 s, newClient), and go-redis's one retry may
				// take another pooled connection of the same proxy,
				// half-open too: two read timeouts. Then a second, as in
				// TestJepsen_ExclusionUnderRandomCancellation, for a loaded
				// 2-core machine.
				maxOverrun:  2*time.Second + time.Second,
				netFaults:   true,
				queuesFirst: m.name == "fair",
				long: func(rnd *rand.Rand) (time.Duration, []instrument.AcquireOption, bool) {
					if rnd.IntN(8) != 0 {
						return 0, nil, false
					}
					return time.Second + time.Duration(rnd.IntN(2000))*time.Millisecond, []instrument.AcquireOption{instrument.WithPollInterval(30 * time.Second)}, true
				},
			}
			var proxies []*testenv.Proxy
			for i := range 3 {
				p := testenv.NewProxy(t, r.Addr())
				proxies = append(proxies, p)
				opts := append(m.opts, redislock.WithInstance(fmt.Sprint(i)))
				if m.name == "fair" {
					// Waiters retry every 10 s: within their wait they
					// hear of a handoff, or of a replaced connection, or
					// give up.
					opts = append(opts, redislock.WithWaiterTimeout(30*time.Second))
				}
				l := newLocker(t, newClient(t, p.Addr()), opts...)
				// A half-open pub/sub connection is found in 0.5-1 s
				// rather than 2-4 s, so that a run of a few seconds
				// replaces several, waiters or not on them.
				redislock.SetHealthInterval(l, 500*time.Millisecond)
				j.lockers = append(j.lockers, l)
			}
			var faults atomic.Int64
			j.fault = func() {
				time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
				k := rand.IntN(len(proxies))
				proxies[k].HalfOpen()
				faults.Add(1)
			}
			// Once everyone is done, the connections still half-open are
			// reset, so that the leaves still being retried run at once
			// instead of waiting out read timeouts on them one by one.
			j.settle = func() {
				for _, p := range proxies {
					p.Reset()
				}
			}
			j.check(t)
			t.Logf("%d proxies made half-open", faults.Load())
		})
	}
}

// jepsen is the workload the TestJepsen_Exclusion* tests share: four
// goroutines per Locker acquire key until run has passed, with random
// deadlines, a quarter of them cancelled at a random moment instead, and
// hold the lock for up to 3 ms. check fails the test when two holders
// overlap, when a fence is not above the previous holder's, when a lease
// is lost while held, when an Acquire returns more than maxOverrun after
// its deadline, or when the lock is still held at the end.
type jepsen struct {
	admin      *redis.Client
	lockers    []*redislock.Locker
	key        string
	run        time.Duration
	maxOverrun time.Duration
	// fault, if set, is called in a loop on a goroutine of its own until
	// the run ends (it sleeps between faults).
	fault func()
	// netFaults says that the fault can make calls time out: an Acquire
	// or a Release failing with a network timeout, and a lease granted
	// with little of its TTL left, are counted, not failed (see
	// TestJepsen_ExclusionUnderHalfOpenConnections).
	netFaults bool
	// long, if set, chooses some Acquire calls to wait longer: their
	// deadline and options instead of the usual 5-155 ms.
	long func(rnd *rand.Rand) (time.Duration, []instrument.AcquireOption, bool)
	// settle, if set, runs after every goroutine is done, before the end
	// check.
	settle func()
	// queuesFirst says that every Acquire queues with its first attempt
	// (Fair): one that failed leaves the queue, and hands on a lock that
	// an attempt whose reply was lost took. Otherwise a failed first
	// attempt may leave the lock to its TTL.
	queuesFirst bool
}

// The outcomes of an Acquire call that may leave the lock held at the end
// (the lock value's "call" label names the call).
const (
	outcomeAcquireFailed = "its Acquire failed with a network error (its reply may have been lost)"
	outcomeReleaseFailed = "its Release failed with a network error"
)

const jepsenTTL = 3 * time.Second

func (j *jepsen) check(t *testing.T) {
	t.Helper()
	var (
		inside     atomic.Int32
		mu         sync.Mutex
		lastFence  uint64
		outcomes   = map[string]string{} // under mu: calls that may leave the lock held
		acquired   atomic.Int64
		gaveUp     atomic.Int64
		overruns   atomic.Int64
		maxOver    atomic.Int64 // the longest time an Acquire returned after its deadline
		maxRel     atomic.Int64 // the longest Release
		netAcq     atomic.Int64 // Acquire failed with a network timeout
		netRel     atomic.Int64 // Release failed with a network timeout
		expiredRel atomic.Int64 // Release found the lock expired after waiting out read timeouts
		late       atomic.Int64 // granted with little TTL left
		longWaits  atomic.Int64
	)
	begin := time.Now()
	end := begin.Add(j.run)
	var wg sync.WaitGroup
	if j.fault != nil {
		wg.Go(func() {
			for time.Now().Before(end) {
				j.fault()
			}
		})
	}
	for i, l := range j.lockers {
		for g := range 4 {
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(i), uint64(g)))
				for n := 0; time.Now().Before(end); n++ {
					call := fmt.Sprintf("%d/%d/%d", i, g, n)
					d := time.Duration(5+rnd.IntN(150)) * time.Millisecond
					opts := []instrument.AcquireOption{instrument.WithTTL(jepsenTTL), instrument.WithMeta(map[string]string{"call": call})}
					if j.long != nil {
						if ld, lopts, ok := j.long(rnd); ok {
							d = ld
							opts = append(opts, lopts...)
							longWaits.Add(1)
						}
					}
					ctx, cancel := context.WithTimeout(context.Background(), d)
					if rnd.IntN(4) == 0 {
						// cancel at a random moment instead
						c2 := time.AfterFunc(time.Duration(rnd.IntN(int(d))), cancel)
						defer c2.Stop()
					}
					start := time.Now()
					lease, err := l.Acquire(ctx, j.key, opts...)
					over := time.Since(start) - d
					if over > j.maxOverrun {
						overruns.Add(1)
					}
					raise(&maxOver, over)
					cancel()
					if err != nil {
						switch {
						case errors.Is(err, instrument.ErrNotAcquired) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
						case j.netFaults && netTimeout(err):
							netAcq.Add(1)
							mu.Lock()
							outcomes[call] = outcomeAcquireFailed
							mu.Unlock()
						default:
							t.Errorf("Acquire: %v", err)
							return
						}
						gaveUp.Add(1)
						continue
					}
					// The lease's local deadline: a holder with less than
					// half a second of it left stays out (netFaults only).
					if left := time.Until(lease.(interface{ Deadline() time.Time }).Deadline()); left < 500*time.Millisecond {
						if !j.netFaults {
							t.Errorf("lease (fence %d) granted with %v of its TTL left", lease.Fence(), left)
						}
						late.Add(1)
					} else {
						if n := inside.Add(1); n != 1 {
							t.Errorf("%d holders at once (fence %d)", n, lease.Fence())
						}
						mu.Lock()
						if lease.Fence() <= lastFence {
							t.Errorf("fence %d not above the previous holder's %d", lease.Fence(), lastFence)
						}
						lastFence = lease.Fence()
						mu.Unlock()
						time.Sleep(time.Duration(rnd.IntN(3000)) * time.Microsecond)
						if err := lease.Context().Err(); err != nil {
							t.Errorf("lease lost while held: %v", context.Cause(lease.Context()))
						}
						inside.Add(-1)
					}
					rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
					rstart := time.Now()
					err = lease.Release(rctx)
					raise(&maxRel, time.Since(rstart))
					if err != nil {
						switch {
						case j.netFaults && (errors.Is(err, instrument.ErrNotHeld) || errors.Is(err, instrument.ErrLockLost)) && time.Now().After(lease.(interface{ Deadline() time.Time }).Deadline()):
							// Its tries waited out read timeouts on
							// half-open connections until the lease had
							// expired: "not held" is the truth then.
							expiredRel.Add(1)
						case !j.netFaults || !netTimeout(err):
							t.Errorf("Release: %v", err)
						default:
							netRel.Add(1)
							mu.Lock()
							outcomes[call] = outcomeReleaseFailed
							mu.Unlock()
							if lease.Context().Err() == nil {
								t.Errorf("a Release whose outcome is unknown (%v) left the lease's context alive", err)
							}
						}
					}
					rcancel()
					acquired.Add(1)
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%v: acquired %d (%d granted with little TTL left), gave up %d (%d long waits), network timeouts: %d Acquire, %d Release (%d more found the lock expired); max overrun %v (%d over %v), longest Release %v",
		time.Since(begin).Round(time.Millisecond), acquired.Load(), late.Load(), gaveUp.Load(), longWaits.Load(), netAcq.Load(), netRel.Load(), expiredRel.Load(), time.Duration(maxOver.Load()), overruns.Load(), j.maxOverrun, time.Duration(maxRel.Load()))
	if overruns.Load() > 0 {
		t.Errorf("%d Acquire calls returned more than %v after their deadline (max %v)", overruns.Load(), j.maxOverrun, time.Duration(maxOver.Load()))
	}
	ctx := timeout(t, 10*time.Second)
	// holder describes who holds key, if anyone, and why the lock may
	// still be held (its call's outcome; "" if it may not).
	holder := func() (desc string, held bool, why string) {
		v, err := j.admin.Get(ctx, j.key).Result()
		if err != nil {
			return "", false, ""
		}
		call := v
		if i := strings.IndexByte(v, '{'); i >= 0 {
			if h, err := lockvalue.Decode([]byte(v[i:])); err == nil {
				call = h.Labels["call"]
			}
		}
		mu.Lock()
		why = outcomes[call]
		mu.Unlock()
		return fmt.Sprintf("%q (%s; PTTL %v, queue %q)", call, why, j.admin.PTTL(ctx, j.key).Val(), j.admin.LRange(ctx, queueKey(j.key), 0, -1).Val()), true, why
	}
	if j.settle != nil {
		j.settle()
		// The leaves of waiters that gave up run in the background, and
		// under a fault they are tried again (backing off to a second)
		// until they run: wait for them to hand on a lock handed to a
		// waiter that gave up, or granted to one whose reply was lost,
		// but for less than a TTL, after which such a lock would be gone
		// anyway (one never handed on would then go unnoticed).
		const wait = jepsenTTL * 5 / 6
		deadline := time.Now().Add(wait)
		for {
			h, held, why := holder()
			if !held || why == outcomeReleaseFailed {
				if held {
					t.Logf("held at the end by %s", h)
				}
				break
			}
			if time.Now().After(deadline) {
				if why == outcomeAcquireFailed && !j.queuesFirst {
					// A first attempt that queued nothing: no leave.
					t.Logf("held at the end by %s", h)
				} else {
					t.Errorf("lock still held %v after everyone finished, by %s", wait, h)
				}
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Close waits for the leaves of waiters that gave up, which run after
	// their Acquire returned.
	for _, l := range j.lockers {
		_ = l.Close()
	}
	if h, held, why := holder(); held && why == "" {
		t.Errorf("lock still held after everyone finished: %s", h)
	}
}

// netTimeout reports whether err is a network timeout: a call that went
// out on a connection nothing came back on.
func netTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// raise sets *m to d if d is larger.
func raise(m *atomic.Int64, d time.Duration) {
	for old := m.Load(); int64(d) > old && !m.CompareAndSwap(old, int64(d)); old = m.Load() {
	}
}
