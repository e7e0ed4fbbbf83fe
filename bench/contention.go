package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockgov/lockgov/bench/internal/floor"
	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/redislock"
)

const (
	contenders = 8
	hold       = time.Millisecond
)

// acquireFunc waits for the lock and returns its release. An error with a nil ctx error is a
// wait strategy giving up (redsync's 32 tries, bsm's retry budget): the contender tries again
// and its wait keeps counting.
type acquireFunc func(ctx context.Context) (release func(context.Context) error, err error)

// contImpl is one library and wait strategy under contention. newContender builds one
// contender with its own client (a separate process, in effect) on key.
type contImpl struct {
	name, strategy string
	newContender   func(e *env, key string) (acquireFunc, func(), error)
}

const (
	nameBSMLinear = "bsm/redislock, linear 1 ms"
	nameBSMExp    = "bsm/redislock, exponential 4-128 ms"
	nameRedsyncC  = "redsync, defaults"
	nameWait      = "lockgov redislock, default wait"
	nameFair      = "lockgov redislock, Fair()"
	nameEtcdMuC   = "etcd concurrency.Mutex"
	nameEtcdlockC = "lockgov etcdlock"
	nameFloorC    = "floor: token ring, no lock"
)

// handoffFloor is the least a pub/sub handoff can cost (floor.Handoff): scriptcost counts
// the same script's instructions.
var handoffFloor = floor.Handoff

// tokenRing is the contention table's floor: no lock at all, only the messages a handoff
// through redis-server cannot do without. The contenders form a ring, each subscribed to a
// channel of its own; the first to ask holds, and each release runs handoffFloor, which
// publishes to the next contender's channel; hearing it is acquiring. Every acquire first
// registers its wait with one command (ZADD), as every lock in the table tells the server
// that it waits again right after its release (an attempt that queues, or a retry). So its
// idle per handoff is one release's trip through redis-server to a subscriber, with the
// same loop around it, and nothing a lock decides: what this machine allows a handoff by
// notification. Its waits are those of a perfect FIFO.
func tokenRing() func(e *env, key string) (acquireFunc, func(), error) {
	type ring struct {
		n      int
		first  atomic.Bool
		joined [contenders]atomic.Bool // asked for the token at least once
	}
	var mu sync.Mutex
	rings := map[string]*ring{} // one per contend call (its key)
	channel := func(key string, i int) string { return fmt.Sprintf("%s:ring:%d", key, i) }
	return func(e *env, key string) (acquireFunc, func(), error) {
		mu.Lock()
		r := rings[key]
		if r == nil {
			r = &ring{}
			rings[key] = r
		}
		i := r.n
		r.n++
		mu.Unlock()
		if i >= contenders {
			return nil, nil, fmt.Errorf("token ring %q: more than %d contenders", key, contenders)
		}
		c := newRedis(e)
		ps := c.Subscribe(context.Background(), channel(key, i))
		if _, err := ps.Receive(context.Background()); err != nil { // the subscription is confirmed
			_ = ps.Close()
			_ = c.Close()
			return nil, nil, err
		}
		keys := []string{key, key + ":tomb", key + ":queue", key + ":fence"}
		release := func(ctx context.Context) error {
			// The token goes to the next contender that has joined: one whose goroutine
			// started only after the run's end never asks, and a token sent to it would be
			// lost while the others wait. One that joins after being skipped gets the
			// token on its next lap; contenders leave only right after passing it on.
			next := i
			for k := 1; k <= contenders; k++ {
				if j := (i + k) % contenders; r.joined[j].Load() {
					next = j
					break
				}
			}
			return handoffFloor.Run(ctx, c, keys, channel(key, next), "next-holder", 10000, 1000).Err()
		}
		return func(ctx context.Context) (func(context.Context) error, error) {
			r.joined[i].Store(true)
			if r.first.CompareAndSwap(false, true) {
				return release, nil
			}
			if err := c.ZAdd(ctx, key+":waiters", redis.Z{Score: float64(i), Member: i}).Err(); err != nil {
				return nil, err
			}
			if _, err := ps.ReceiveMessage(ctx); err != nil {
				return nil, err
			}
			return release, nil
		}, func() { _ = ps.Close(); _ = c.Close() }, nil
	}
}

func contImpls() []contImpl {
	lockgov := func(opts ...redislock.Option) func(e *env, key string) (acquireFunc, func(), error) {
		return func(e *env, key string) (acquireFunc, func(), error) {
			c := newRedis(e)
			l, err := redislock.New(c, opts...)
			if err != nil {
				return nil, nil, err
			}
			return lockgovAcquire(l, key), func() { _ = c.Close() }, nil
		}
	}
	bsmWith := func(strategy func() bsm.RetryStrategy) func(e *env, key string) (acquireFunc, func(), error) {
		return func(e *env, key string) (acquireFunc, func(), error) {
			c := newRedis(e)
			cl := bsm.New(c)
			return func(ctx context.Context) (func(context.Context) error, error) {
				lock, err := cl.Obtain(ctx, key, 10*time.Second, &bsm.Options{RetryStrategy: strategy()})
				if err != nil {
					return nil, err
				}
				return lock.Release, nil
			}, func() { _ = c.Close() }, nil
		}
	}
	return []contImpl{
		{nameFloorC, "PUBLISH to the next in a ring", tokenRing()},
		{nameBSMLinear, "retry every 1 ms", bsmWith(func() bsm.RetryStrategy { return bsm.LinearBackoff(time.Millisecond) })},
		{nameBSMExp, "retry after 4, 8, 16 ... 128 ms", bsmWith(func() bsm.RetryStrategy {
			return bsm.ExponentialBackoff(time.Millisecond, 128*time.Millisecond)
		})},
		{nameRedsyncC, "32 tries, 50-250 ms apart", func(e *env, key string) (acquireFunc, func(), error) {
			c := newRedis(e)
			m := redsync.New(goredis.NewPool(c)).NewMutex(key)
			return func(ctx context.Context) (func(context.Context) error, error) {
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
			}, func() { _ = c.Close() }, nil
		}},
		{nameWait, "pub/sub release notification", lockgov()},
		{nameFair, "FIFO queue", lockgov(redislock.Fair())},
		{nameEtcdMuC, "one Session per contender", func(e *env, key string) (acquireFunc, func(), error) {
			s, closeSession, err := e.etcdSession()
			if err != nil {
				return nil, nil, err
			}
			m := concurrency.NewMutex(s, "/bench/mutex/"+key)
			return func(ctx context.Context) (func(context.Context) error, error) {
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return m.Unlock, nil
			}, closeSession, nil
		}},
		{nameEtcdlockC, "watch on the queue (<= 16 ahead)", func(e *env, key string) (acquireFunc, func(), error) {
			cli, err := e.etcdClient()
			if err != nil {
				return nil, nil, err
			}
			l, err := etcdlock.New(cli)
			if err != nil {
				_ = cli.Close()
				return nil, nil, err
			}
			return lockgovAcquire(l, key), func() { _ = cli.Close() }, nil
		}},
	}
}

func lockgovAcquire(l instrument.Locker, key string) acquireFunc {
	return func(ctx context.Context) (func(context.Context) error, error) {
		lease, err := l.Acquire(ctx, key, instrument.WithTTL(10*time.Second))
		if err != nil {
			return nil, err
		}
		return lease.Release, nil
	}
}

// contRow is one library under contention: medians over the rounds, and every wait of every
// round for the CDF.
type contRow struct {
	name, strategy string
	acqPerSec      float64
	busy           float64 // sum of holds / wall time
	p50, p99, maxW float64 // ms
	minAcq, maxAcq float64 // per contender, medians over rounds
	share          float64 // min/max acquisitions per contender
	retries        float64 // wait-strategy give-ups per acquisition
	dials          float64 // new redis connections per acquisition
	meanHold       float64 // ms
	perContender   []int   // of the median round (by acquisitions/s)
	waits          []time.Duration
	rounds         []contRound
}

type contRound struct {
	acq          int
	wall         time.Duration
	held         time.Duration
	waits        []time.Duration // sorted
	perContender []int
	giveUps      int
	dials        int64 // new redis connections during the round
}

// idle is the time the lock sat free per handoff, in ms: (wall - holds) / acquisitions, from
// the medians.
func (r *contRow) idle() float64 { return 1000 * (1 - r.busy) / r.acqPerSec }

func (r contRound) acqPerSec() float64 { return float64(r.acq) / r.wall.Seconds() }

// contend runs contenders on one fresh key for d: each loops acquire, hold 1 ms (time.Sleep),
// release. After d no contender starts a new wait; waits in flight finish and count, and the
// wall time runs until the last release.
func contend(ctx context.Context, e *env, im contImpl, key string, d time.Duration) (contRound, error) {
	acq := make([]acquireFunc, contenders)
	for i := range acq {
		a, cleanup, err := im.newContender(e, key)
		if err != nil {
			return contRound{}, err
		}
		defer cleanup()
		acq[i] = a
	}
	runCtx, cancel := context.WithTimeout(ctx, d+2*time.Minute)
	defer cancel()
	waits := make([][]time.Duration, contenders)
	held := make([]time.Duration, contenders)
	giveUps := make([]int, contenders)
	errs := make([]error, contenders)
	var wg sync.WaitGroup
	dials0 := e.dials.Load()
	runtime.GC() // from a collected heap, as measurePairs
	start := time.Now()
	end := start.Add(d)
	for i := range contenders {
		waits[i] = make([]time.Duration, 0, 4096)
		wg.Go(func() {
			for time.Now().Before(end) {
				t0 := time.Now()
				var release func(context.Context) error
				for {
					r, err := acq[i](runCtx)
					if err == nil {
						release = r
						break
					}
					if runCtx.Err() != nil {
						errs[i] = err
						return
					}
					if !giveUp(err) {
						errs[i] = err
						return
					}
					giveUps[i]++
				}
				h0 := time.Now()
				waits[i] = append(waits[i], h0.Sub(t0))
				time.Sleep(hold)
				held[i] += time.Since(h0)
				if err := release(runCtx); err != nil {
					errs[i] = fmt.Errorf("release: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return contRound{}, err
	}
	r := contRound{wall: wall, waits: slices.Concat(waits...), dials: e.dials.Load() - dials0}
	slices.Sort(r.waits)
	r.acq = len(r.waits)
	for i := range contenders {
		r.held += held[i]
		r.perContender = append(r.perContender, len(waits[i]))
		r.giveUps += giveUps[i]
	}
	return r, nil
}

// giveUp reports a wait strategy ending without the lock while the context is still live.
func giveUp(err error) bool {
	return errors.Is(err, bsm.ErrNotObtained) || errors.Is(err, redsync.ErrFailed) ||
		errors.Is(err, instrument.ErrNotAcquired) || errors.As(err, new(*redsync.ErrTaken))
}

// roundTrips is what the messages a handoff is made of cost on this machine, measured in the
// contention rounds, each kind on clients of their own: PINGs sent back to back (a round trip
// between busy processes); PINGs each sent right after the sender slept for a hold, as a
// release is sent (redis-server has been idle too); and PUBLISHes each sent right after a
// hold's sleep to a subscriber that has been waiting since the last one, timed to the
// subscriber's goroutine holding the message. The last is a handoff by notification with
// nothing else in it: no lock, no script, one command in and one message out, both processes
// idle as a holder's and a waiter's are. No handoff by notification can be shorter on the
// machine; the contention floor adds a lock's worth of writes and eight contenders to it.
type roundTrips struct {
	hot, idle, notify []time.Duration // sorted, all rounds
	rounds            int
}

// pingsPerRound is how many messages of each kind a contention round sends (about 0.5 s).
const pingsPerRound = 200

// measureRoundTrips adds pingsPerRound messages of each kind to rt.
func measureRoundTrips(ctx context.Context, e *env, rt *roundTrips) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, sc := newRedis(e), newRedis(e)
	defer func() { _ = c.Close(); _ = sc.Close() }()
	if err := c.Ping(ctx).Err(); err != nil {
		return err
	}
	for i := range 2 * pingsPerRound {
		idle := i >= pingsPerRound
		if idle {
			time.Sleep(hold)
		}
		t0 := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return err
		}
		if d := time.Since(t0); idle {
			rt.idle = append(rt.idle, d)
		} else {
			rt.hot = append(rt.hot, d)
		}
	}

	const channel = "bench:roundtrips"
	ps := sc.Subscribe(ctx, channel)
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		_ = ps.Close()
		return err
	}
	// The subscriber's goroutine reports each message's arrival on heard and a failed read
	// on recvErr (nothing on success, so that the last arrival never races a nil there),
	// and closes finished when it returns.
	heard := make(chan time.Time, 1)
	recvErr := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for range pingsPerRound {
			if _, err := ps.ReceiveMessage(ctx); err != nil {
				recvErr <- err
				return
			}
			heard <- time.Now()
		}
	}()
	// On every return: closing ps ends a read under way, and the goroutine is gone after.
	defer func() { _ = ps.Close(); <-finished }()
	for range pingsPerRound {
		time.Sleep(hold)
		t0 := time.Now()
		if err := c.Publish(ctx, channel, "x").Err(); err != nil {
			return err
		}
		select {
		case at := <-heard:
			rt.notify = append(rt.notify, at.Sub(t0))
		case err := <-recvErr:
			return fmt.Errorf("subscriber: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rt.rounds++
	return nil
}

// meanNotify is the mean notification after idle, in µs.
func (rt *roundTrips) meanNotify() float64 { return us(mean(rt.notify)) }

// busyAt is the busy a lock held holdMs on average reaches when each handoff costs exactly
// one notification after idle (its mean) and nothing else.
func (rt *roundTrips) busyAt(holdMs float64) float64 {
	return holdMs / (holdMs + rt.meanNotify()/1000)
}

// scriptTimes is redis-server's own time per handoff script under contention, from SLOWLOG:
// the floor's script, and lockgov's release.lua (default wait), which hands the lock to the
// next waiter. Both run on the handoff's path (the waiter hears of the handoff only after the
// script ends), so their difference is server work a lockgov handoff adds to the floor's. It
// is read in one extra pass of each of the two cases after the rounds, not in the rounds
// themselves: logging costs the server a little per logged command.
type scriptTimes struct {
	floor, release    []time.Duration // sorted
	floorAcq, waitAcq int             // acquisitions in the pass: how many scripts ran
}

// measured reports whether both scripts' times were read.
func (st *scriptTimes) measured() bool { return st != nil && len(st.floor) > 0 && len(st.release) > 0 }

// slowlogMinUs is the pass's slowlog-log-slower-than: under contention a script call takes
// tens of µs and is nearly always logged, while the commands inside it (1-3 µs each) mostly
// are not, so that logging them does not count inside the script's own time.
const slowlogMinUs = 5

// releaseKeys is how many keys lockgov's release.lua is sent with on one node (lock,
// tombstone, queue, fence counter, waiter deadlines; store.go); its second key, and no other
// script's, is a release's tombstone (keys.go names it "<base>:rel:<hash>").
const (
	releaseKeys = "5"
	tombstoneIn = ":rel:"
)

// classifyScripts picks the floor's script calls (by digest) and lockgov's release calls (by
// their keys: five, the second a tombstone) out of slowlog entries; everything else (other
// scripts, commands inside scripts) is left out.
func classifyScripts(entries []redis.SlowLog, floorSHA string) (floor, release []time.Duration) {
	for _, e := range entries {
		if len(e.Args) < 3 {
			continue
		}
		switch strings.ToLower(e.Args[0]) {
		case "evalsha":
			if e.Args[1] == floorSHA {
				floor = append(floor, e.Duration)
				continue
			}
		case "eval":
		default:
			continue
		}
		if e.Args[2] == releaseKeys && len(e.Args) > 4 && strings.Contains(e.Args[4], tombstoneIn) {
			release = append(release, e.Duration)
		}
	}
	slices.Sort(floor)
	slices.Sort(release)
	return floor, release
}

// measureScriptTimes runs the floor and lockgov's default wait once more each for d with
// every command of minUs µs or more logged (the runner: slowlogMinUs), and reads their
// handoff scripts' times. The server's slowlog settings are restored after.
func measureScriptTimes(ctx context.Context, e *env, impls []contImpl, d time.Duration, minUs int) (*scriptTimes, error) {
	admin := newRedis(e)
	defer func() { _ = admin.Close() }()
	saved, err := admin.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		return nil, err
	}
	defer func() {
		// Restored even when ctx has ended (an interrupted run), within a bound of its own.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, k := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
			if v, ok := saved[k]; ok {
				_ = admin.ConfigSet(rctx, k, v).Err()
			}
		}
	}()
	const maxLen = 200000
	st := &scriptTimes{}
	for _, name := range []string{nameFloorC, nameWait} {
		i := slices.IndexFunc(impls, func(im contImpl) bool { return im.name == name })
		if i < 0 {
			return nil, fmt.Errorf("script times: no case %q", name)
		}
		for k, v := range map[string]string{"slowlog-max-len": fmt.Sprint(maxLen), "slowlog-log-slower-than": fmt.Sprint(minUs)} {
			if err := admin.ConfigSet(ctx, k, v).Err(); err != nil {
				return nil, err
			}
		}
		// A short run first, so that the scripts are in the server's cache: a first call's
		// EVALSHA fails with NOSCRIPT and goes to the log too, before its EVAL fallback.
		if _, err := contend(ctx, e, impls[i], fmt.Sprintf("lock:bench:scripts:warm:%d", i), 20*time.Millisecond); err != nil {
			return nil, fmt.Errorf("script times, %s: %w", name, err)
		}
		if err := admin.SlowLogReset(ctx).Err(); err != nil {
			return nil, err
		}
		r, err := contend(ctx, e, impls[i], fmt.Sprintf("lock:bench:scripts:%d", i), d)
		if err != nil {
			return nil, fmt.Errorf("script times, %s: %w", name, err)
		}
		// Stop logging before reading, so the read is not in the log it reads.
		if err := admin.ConfigSet(ctx, "slowlog-log-slower-than", "-1").Err(); err != nil {
			return nil, err
		}
		entries, err := admin.SlowLogGet(ctx, maxLen).Result()
		if err != nil {
			return nil, err
		}
		floor, release := classifyScripts(entries, handoffFloor.Hash())
		if name == nameFloorC {
			st.floor, st.floorAcq = floor, r.acq
		} else {
			st.release, st.waitAcq = release, r.acq
		}
	}
	return st, nil
}

func runContention(ctx context.Context, e *env, cfg config, rounds int, out io.Writer) ([]contRow, *roundTrips, *scriptTimes, error) {
	impls := contImpls()
	rt := &roundTrips{}
	rows := make([]contRow, len(impls))
	idx := map[string]int{}
	for i, im := range impls {
		rows[i] = contRow{name: im.name, strategy: im.strategy}
		idx[im.name] = i
	}
	for round := range rounds {
		fmt.Fprintf(out, "  round %d: ", round+1)
		if err := measureRoundTrips(ctx, e, rt); err != nil {
			return nil, nil, nil, fmt.Errorf("contention, round trips: %w", err)
		}
		for _, im := range roundOrder(impls, round) {
			key := fmt.Sprintf("lock:bench:contended:%d:%d", idx[im.name], round)
			r, err := contend(ctx, e, im, key, cfg.contDur)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("contention, %s: %w", im.name, err)
			}
			rows[idx[im.name]].rounds = append(rows[idx[im.name]].rounds, r)
			fmt.Fprintf(out, "%s %.0f/s busy %.0f%%  ", im.name, r.acqPerSec(), 100*float64(r.held)/float64(r.wall))
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "  script times (SLOWLOG): %s and %s, %v each\n", nameFloorC, nameWait, cfg.contDur)
	st, err := measureScriptTimes(ctx, e, impls, cfg.contDur, slowlogMinUs)
	if err != nil {
		return nil, nil, nil, err
	}
	for i := range rows {
		summarizeContRow(&rows[i])
	}
	slices.Sort(rt.hot)
	slices.Sort(rt.idle)
	slices.Sort(rt.notify)
	return rows, rt, st, nil
}

func summarizeContRow(r *contRow) {
	var acq, busy, p50, p99, mx, mn, mxA, share, retries, dials, hold []float64
	for _, x := range r.rounds {
		acq = append(acq, x.acqPerSec())
		busy = append(busy, float64(x.held)/float64(x.wall))
		p50 = append(p50, ms(quantile(x.waits, 0.5)))
		p99 = append(p99, ms(quantile(x.waits, 0.99)))
		mx = append(mx, ms(quantile(x.waits, 1)))
		lo, hi := slices.Min(x.perContender), slices.Max(x.perContender)
		mn, mxA = append(mn, float64(lo)), append(mxA, float64(hi))
		share = append(share, float64(lo)/float64(max(hi, 1)))
		retries = append(retries, float64(x.giveUps)/float64(max(x.acq, 1)))
		dials = append(dials, float64(x.dials)/float64(max(x.acq, 1)))
		hold = append(hold, ms(x.held)/float64(max(x.acq, 1)))
		r.waits = append(r.waits, x.waits...)
	}
	slices.Sort(r.waits)
	r.acqPerSec, r.busy, r.p50, r.p99, r.maxW = median(acq), median(busy), median(p50), median(p99), median(mx)
	r.minAcq, r.maxAcq, r.share, r.retries, r.dials = median(mn), median(mxA), median(share), median(retries), median(dials)
	r.meanHold = median(hold)
	// The per-contender chart shows the round whose acquisitions/s is the median.
	order := make([]int, len(r.rounds))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := r.rounds[a].acqPerSec(), r.rounds[b].acqPerSec()
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	if len(order) > 0 {
		r.perContender = r.rounds[order[len(order)/2]].perContender
	}
}
