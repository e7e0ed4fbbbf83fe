package redislock

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultIdleTimeout is how long a Locker keeps its pub/sub connection, and
// each channel subscription on it, after the last waiter left. See
// WithIdleTimeout.
const DefaultIdleTimeout = 30 * time.Second

// maxIdleChannels bounds the subscriptions a Locker keeps with nobody
// waiting on them: a Locker that waits on many distinct keys (one per order)
// should not receive the release of every one of them for the idle timeout.
// Past it, the subscription unused for the longest time is dropped.
const maxIdleChannels = 256

// Backoff of the reader between reconnection attempts.
const (
	minReconnectDelay = 50 * time.Millisecond
	maxReconnectDelay = time.Second
)

// pending is the readySeq of a channel whose barrier is not written yet.
const pending = math.MaxUint64

// barrierPrefix marks the payload of the notifier's own PINGs.
const barrierPrefix = "redislock:"

// healthInterval is how often the writer checks a connection that has
// waiters: one that delivered nothing since the last check is sent a
// barrier PING, and one that has not answered it by the next check is
// taken for half-open (a NAT or a partition that dropped the flow without
// a reset, which no read error reports for minutes, until TCP keepalive
// gives up) and replaced. go-redis's PubSub.Channel checks every 3s the
// same way; lockgov reads with Receive, which has no such check, because
// it needs the PINGs' replies.
const healthInterval = 2 * time.Second

// ErrClosed is returned by Acquire on a Locker after Close, and wrapped in
// the error of a Release after Close whose lock could not be given back
// (it is left to its TTL: see Close).
var ErrClosed = errors.New("redislock: Locker closed (Close was called)")

// Close closes the Locker's pub/sub connection and makes every later
// Acquire fail with ErrClosed. An Acquire waiting for a release
// notification, or in-process behind another Acquire of the same Locker on
// the same key, returns ErrClosed at once; one that polls (Retry, quorum
// mode) when its current pause ends. Leases already acquired stay valid:
// Release and Refresh do not need the Locker to be open. A Release whose
// outcome is unknown then gives the lock back in the caller, once, within
// the caller's context (and a second): not at all when that context has
// ended, so that it returns at once; what it does not give back is left to
// its TTL, and its error says so, wrapping ErrClosed. An Acquire that gives
// up after Close leaves the same way. Close waits for the Locker's
// reader and writer goroutines to exit (a dial in progress ends within the
// client's dial and read timeouts) and for the tries in flight of the
// background leaves (of waiters that gave up, see Waiting: the handoff, and
// of Releases whose outcome was unknown; a second at most each), stops the
// leaves waiting to try, and may be called more than once.
//
// A Locker that is not closed closes its connection by itself after the
// idle timeout (WithIdleTimeout); Close makes that immediate, which tests
// that check for leaked goroutines need.
func (l *Locker) Close() error { return l.notify.close() }

// notifier shares one pub/sub connection among every waiter of a Locker.
//
// The connection, with the goroutine that reads it, is opened by the first
// waiter and kept until nobody has waited for the idle timeout, so that
// contention does not cost a TCP connection per Acquire. A channel stays
// subscribed for the idle timeout after its last waiter left, so that the
// next wait on the same key needs no SUBSCRIBE and no confirmation.
//
// A subscription counts as confirmed when the reply to a PING written after
// the SUBSCRIBE arrives (a barrier): replies come in command order on one
// connection, and go-redis resubscribes every channel on a new connection
// before anything else is written to it. This stays right across
// UNSUBSCRIBE/SUBSCRIBE pairs and reconnections, where counting "subscribe"
// confirmations would not.
//
// Waiting Acquire calls of every key take mu, so it guards state only and is
// never held across network I/O: a write, or the dial and HELLO of a new
// connection, can take the client's dial and read timeouts, which no
// waiter's deadline bounds. The connection's writer goroutine does every
// write (write, flush); a waiter registers what it needs under mu and waits
// for its channel's ready with its own deadline.
type notifier struct {
	c    redis.UniversalClient
	idle time.Duration
	// suffix makes a key's channel this Locker's own: channels are
	// subscribed as name+suffix, and known here by name alone.
	suffix string

	closed atomic.Bool // set under mu, read without it on Acquire's fast path
	// done is closed with closed, for the waits that are not on a
	// connection's channel: the local queue's (localQueue.closed).
	done chan struct{}

	health time.Duration // healthInterval, shorter in tests

	mu   sync.Mutex
	conn *pubsubConn    // nil while there is no connection
	wg   sync.WaitGroup // the readers and writers, and detached leaves (goTracked)
}

// pubsubConn is one pub/sub connection, the goroutine that reads it and the
// goroutine that writes to it.
type pubsubConn struct {
	// ps is replaced, under the notifier's mutex, by the writer alone (a
	// half-open connection: check), which may read it without the mutex.
	ps       *redis.PubSub
	chans    map[string]*channelState
	drop     []string // channels (with the suffix) whose UNSUBSCRIBE the writer owes
	idleN    int      // channels with no waiter
	waitersN int      // waiters on all channels
	seq      uint64   // last barrier PING numbered
	needPing bool     // a barrier is owed after a broken connection
	heard    bool     // a message or a reply arrived since the last health check
	probed   bool     // the last health check owed a barrier: it must be answered by the next
	timer    *time.Timer
	armed    bool
	kick     chan struct{} // buffered 1: the writer has something to write
	quit     chan struct{} // closed when the connection is stopped
}

type channelState struct {
	ready     chan struct{} // closed when the subscription is confirmed
	unsent    bool          // the writer owes its SUBSCRIBE
	readySeq  uint64        // barrier that confirms it; 0 once confirmed
	rewake    bool          // wake the waiters when confirmed: messages may have been lost
	waiters   map[*waiter]struct{}
	idleSince time.Time // when the last waiter left
}

// waiter is one Acquire call waiting for a release on one channel.
type waiter struct {
	pc      *pubsubConn
	id      string // fair mode: woken only by messages naming it (or empty ones)
	channel string
	wake    chan struct{} // buffered 1: a release seen since the last drain
	ready   <-chan struct{}
	handed  atomic.Uint64 // the fence of the last handoff to this waiter (0: none)
}

// handedOver returns the fence of the last handoff notification naming w,
// 0 when there was none (or w is nil).
func (w *waiter) handedOver() uint64 {
	if w == nil {
		return 0
	}
	return w.handed.Load()
}

// subscribe registers a waiter on channel. The returned waiter's ready
// channel closes once Redis has confirmed the subscription: a release
// published after that point is never missed (it is closed already when the
// channel was subscribed before). The SUBSCRIBE is the writer's to send:
// subscribe does no I/O, and the caller waits for ready under its own
// deadline. It fails only on a closed Locker (ErrClosed).
func (n *notifier) subscribe(ctx context.Context, channel, id string) (*waiter, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed.Load() {
		return nil, ErrClosed
	}
	pc := n.conn
	if pc == nil {
		pc = &pubsubConn{chans: make(map[string]*channelState), kick: make(chan struct{}, 1), quit: make(chan struct{})}
		pc.ps = n.c.Subscribe(context.WithoutCancel(ctx)) // no channel: no I/O yet
		n.conn = pc
		n.wg.Add(2)
		go n.read(pc)
		go n.write(pc)
	}
	cs := pc.chans[channel]
	if cs == nil {
		cs = &channelState{ready: make(chan struct{}), unsent: true, readySeq: pending, waiters: make(map[*waiter]struct{})}
		pc.chans[channel] = cs
		pc.wake()
	} else if len(cs.waiters) == 0 {
		pc.idleN--
	}
	w := &waiter{pc: pc, id: id, channel: channel, wake: make(chan struct{}, 1), ready: cs.ready}
	cs.waiters[w] = struct{}{}
	pc.waitersN++
	return w, nil
}

// subscribed reports whether channel is subscribed and confirmed: join
// then registers a waiter on it without a round trip.
func (n *notifier) subscribed(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		return false
	}
	cs := n.conn.chans[channel]
	return cs != nil && cs.readySeq == 0
}

// join registers a waiter on channel if it is subscribed and confirmed,
// and returns nil otherwise (subscribe then).
func (n *notifier) join(channel, id string) *waiter {
	n.mu.Lock()
	defer n.mu.Unlock()
	pc := n.conn
	if pc == nil || n.closed.Load() {
		return nil
	}
	cs := pc.chans[channel]
	if cs == nil || cs.readySeq != 0 {
		return nil
	}
	if len(cs.waiters) == 0 {
		pc.idleN--
	}
	w := &waiter{pc: pc, id: id, channel: channel, wake: make(chan struct{}, 1), ready: cs.ready}
	cs.waiters[w] = struct{}{}
	pc.waitersN++
	return w
}

// unsubscribe removes w. The channel stays subscribed, and the connection
// open, for the idle timeout.
func (n *notifier) unsubscribe(w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	pc := w.pc
	if n.conn != pc {
		return // closed
	}
	cs := pc.chans[w.channel]
	if cs == nil {
		return
	}
	if _, ok := cs.waiters[w]; !ok {
		return
	}
	delete(cs.waiters, w)
	pc.waitersN--
	if len(cs.waiters) > 0 {
		return
	}
	cs.idleSince = time.Now()
	pc.idleN++
	if pc.idleN > maxIdleChannels {
		n.dropOldestIdleLocked(pc)
	}
	n.armLocked(pc, n.idle)
}

// dropOldestIdleLocked unsubscribes the channel that has gone unused for
// the longest time.
func (n *notifier) dropOldestIdleLocked(pc *pubsubConn) {
	var oldest string
	var since time.Time
	for name, cs := range pc.chans {
		if len(cs.waiters) == 0 && (since.IsZero() || cs.idleSince.Before(since)) {
			oldest, since = name, cs.idleSince
		}
	}
	if since.IsZero() {
		return
	}
	n.unsubscribeLocked(pc, oldest)
}

// unsubscribeLocked drops idle channels; the writer sends the UNSUBSCRIBE.
// A later waiter subscribes them again with a new barrier, whose reply
// comes after the UNSUBSCRIBE's: the writer writes the UNSUBSCRIBEs it owes
// before the SUBSCRIBEs.
func (n *notifier) unsubscribeLocked(pc *pubsubConn, channels ...string) {
	for _, ch := range channels {
		delete(pc.chans, ch)
		pc.idleN--
		pc.drop = append(pc.drop, ch+n.suffix)
	}
	pc.wake()
}

// armLocked schedules a sweep in d unless one is scheduled already; a sweep
// reschedules itself for the next channel to expire.
func (n *notifier) armLocked(pc *pubsubConn, d time.Duration) {
	if pc.armed {
		return
	}
	pc.armed = true
	if pc.timer == nil {
		pc.timer = time.AfterFunc(d, func() { n.sweep(pc) })
		return
	}
	pc.timer.Reset(d)
}

// sweep unsubscribes the channels idle for the idle timeout, and closes the
// connection when that leaves none.
func (n *notifier) sweep(pc *pubsubConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn != pc {
		return
	}
	pc.armed = false
	now := time.Now()
	var stale []string
	var next time.Time
	for name, cs := range pc.chans {
		if len(cs.waiters) > 0 {
			continue
		}
		if due := cs.idleSince.Add(n.idle); !due.After(now) {
			stale = append(stale, name)
		} else if next.IsZero() || due.Before(next) {
			next = due
		}
	}
	if len(stale) == len(pc.chans) {
		n.stopLocked(pc)
		return
	}
	if len(stale) > 0 {
		n.unsubscribeLocked(pc, stale...)
	}
	if !next.IsZero() {
		n.armLocked(pc, next.Sub(now))
	}
}

// stopLocked stops the pub/sub connection; its writer closes it, and its
// reader and writer exit on their own (close waits for them through n.wg).
func (n *notifier) stopLocked(pc *pubsubConn) {
	n.conn = nil
	if pc.timer != nil {
		pc.timer.Stop()
	}
	close(pc.quit)
	for _, cs := range pc.chans {
		closeOnce(cs.ready)
		for w := range cs.waiters {
			w.signal()
		}
	}
}

func (n *notifier) close() error {
	n.mu.Lock()
	if !n.closed.Load() {
		close(n.done)
	}
	n.closed.Store(true)
	if pc := n.conn; pc != nil {
		n.stopLocked(pc)
	}
	n.mu.Unlock()
	n.wg.Wait()
	return nil
}

func (n *notifier) isClosed() bool { return n.closed.Load() }

// goTracked runs f on a goroutine that close waits for, and reports false
// without running it when the notifier is closed (close may be waiting
// already).
func (n *notifier) goTracked(f func()) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed.Load() {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// backOff is the package's backOff (a jittered wait, then *delay doubled up
// to maxReconnectDelay): the pause of the reader and of the writer after a
// failure. It reports false if the
// connection was stopped meanwhile.
func (pc *pubsubConn) backOff(delay *time.Duration) bool { return backOff(delay, pc.quit) }

// backOff waits between half of *delay and *delay (jittered), then
// doubles *delay up to maxReconnectDelay. It reports false if stop was
// closed first. The jitter spreads the retries of many processes that
// failed in one outage (their pub/sub reconnections, their waiters'
// leaves), which would otherwise reach the server in step when it returns.
func backOff(delay *time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(jittered(*delay))
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
		return false
	}
	*delay = min(2**delay, maxReconnectDelay)
	return true
}

// jittered returns a duration drawn uniformly from [d/2, d].
func jittered(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d - rand.N(d/2+1)
}

// wake tells the writer that there is something to write.
func (pc *pubsubConn) wake() {
	select {
	case pc.kick <- struct{}{}:
	default:
	}
}

// write does every write on the connection, so that no waiter waits for
// one (see notifier), and closes the connection once it is stopped: Close
// unblocks the reader's Receive, and waits for a dial in progress, which
// must not happen under n.mu either.
func (n *notifier) write(pc *pubsubConn) {
	defer n.wg.Done()
	defer func() { _ = pc.ps.Close() }()
	health := time.NewTicker(n.health)
	defer health.Stop()
	delay := minReconnectDelay
	for {
		select {
		case <-pc.kick:
		case <-health.C:
			if old := n.check(pc); old != nil {
				// Ends the reader's Receive on it: the reader goes on with
				// the new one.
				_ = old.Close()
			}
		case <-pc.quit:
			return
		}
		if n.flush(pc) {
			delay = minReconnectDelay
			continue
		}
		// The write failed: what it owed, and a barrier, are written again
		// after a pause, whether or not the reader saw the connection go.
		if !pc.backOff(&delay) {
			return
		}
		pc.wake()
	}
}

// check is the health check (healthInterval) of pc while it has waiters. A
// connection that delivered nothing since the last check owes a barrier; one
// that delivered nothing since that barrier was owed is replaced by a new
// PubSub, which the writer subscribes to every channel before a new
// barrier, and check returns the old one for the writer to close. As after
// a broken connection, every waiter tries again now, and again when its
// channel is confirmed on the new connection.
func (n *notifier) check(pc *pubsubConn) *redis.PubSub {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn != pc {
		return nil
	}
	heard := pc.heard
	pc.heard = false
	if heard || pc.waitersN == 0 {
		pc.probed = false
		return nil
	}
	if !pc.probed {
		pc.probed = true
		pc.needPing = true
		pc.wake()
		return nil
	}
	pc.probed = false
	old := pc.ps
	pc.ps = n.c.Subscribe(context.Background()) // no channel: no I/O yet
	pc.drop = nil                               // the new connection has none of the old one's channels
	for _, cs := range pc.chans {
		cs.unsent = true
	}
	n.brokenLocked(pc)
	pc.wake()
	return old
}

// flush writes what the connection is owed: the UNSUBSCRIBEs of dropped
// channels, the SUBSCRIBEs of new ones, then a barrier, on which every
// channel subscribed so far is confirmed when its reply arrives. The
// barrier is numbered before it is written, under n.mu, because the reader
// may dispatch its reply before flush could take n.mu again. flush reports
// false when a write failed.
func (n *notifier) flush(pc *pubsubConn) bool {
	n.mu.Lock()
	if n.conn != pc {
		n.mu.Unlock()
		return true
	}
	drop := pc.drop
	pc.drop = nil
	var subs, subNames []string
	for name, cs := range pc.chans {
		if cs.unsent {
			cs.unsent = false
			subs = append(subs, name+n.suffix)
			subNames = append(subNames, name)
		}
	}
	var ping string
	if len(subs) > 0 || pc.needPing {
		pc.seq++
		ping = barrierPrefix + strconv.FormatUint(pc.seq, 10)
		for _, cs := range pc.chans {
			if cs.readySeq == pending {
				cs.readySeq = pc.seq
			}
		}
		pc.needPing = false
	}
	n.mu.Unlock()

	// Writes on the shared connection are bounded by the client's dial
	// and write timeouts, not by a caller's deadline: go-redis replaces a
	// connection whose write ran into a context deadline, which would cost
	// every waiter of the Locker its notifications for one impatient
	// caller.
	ctx := context.Background()
	var err error
	if len(drop) > 0 {
		err = pc.ps.Unsubscribe(ctx, drop...)
	}
	var subErr error
	if len(subs) > 0 {
		// Even after a failed write: the new connection go-redis dialled
		// for it must be subscribed too (it resubscribes only the channels
		// it knew before).
		subErr = pc.ps.Subscribe(ctx, subs...)
		if err == nil {
			err = subErr
		}
	}
	if err == nil && ping != "" {
		err = pc.ps.Ping(ctx, ping)
	}
	if err == nil {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn != pc {
		return true
	}
	if pc.waitersN == 0 {
		// As in read: the next waiter opens a fresh connection.
		n.stopLocked(pc)
		return true
	}
	if subErr != nil {
		// go-redis replaces a connection whose SUBSCRIBE failed inside
		// Subscribe: it dials and resubscribes the channels it knew, and
		// adds these only after that, so the new connection lacks them and
		// no later connection is coming. The next flush subscribes them
		// again, before the barrier that confirms them.
		for _, name := range subNames {
			if cs := pc.chans[name]; cs != nil {
				cs.unsent = true
			}
		}
	}
	// The failed write made go-redis replace the connection.
	n.brokenLocked(pc)
	return false
}

// brokenLocked handles a connection that failed, or was replaced by go-redis
// after a failed read or write: releases published meanwhile were lost. Every
// waiter is woken to try again now, every channel waits for a new barrier
// (the writer writes it after a pause, dialling and resubscribing if need
// be), and its waiters are woken again when the barrier comes back, so a
// release published before the resubscription is not missed either. Until
// then, waiters poll.
func (n *notifier) brokenLocked(pc *pubsubConn) {
	for _, cs := range pc.chans {
		if cs.readySeq == 0 {
			cs.ready = make(chan struct{})
		}
		cs.readySeq = pending
		cs.rewake = true
		for w := range cs.waiters {
			w.signal()
		}
	}
	pc.needPing = true
}

// read dispatches messages and barrier replies until the connection is
// stopped.
func (n *notifier) read(pc *pubsubConn) {
	defer n.wg.Done()
	ctx := context.Background()
	delay := minReconnectDelay
	for {
		n.mu.Lock()
		ps := pc.ps
		n.mu.Unlock()
		msg, err := ps.Receive(ctx)
		n.mu.Lock()
		if n.conn != pc {
			n.mu.Unlock()
			return
		}
		if err == nil {
			pc.heard = true
			n.dispatchLocked(pc, msg)
			delay = minReconnectDelay
			n.mu.Unlock()
			continue
		}
		if pc.waitersN == 0 {
			// Nobody waits: let the next waiter open a fresh connection
			// instead of redialling a server that may be gone.
			n.stopLocked(pc)
			n.mu.Unlock()
			return
		}
		n.brokenLocked(pc)
		n.mu.Unlock()

		if !pc.backOff(&delay) {
			return
		}
		n.mu.Lock()
		if n.conn == pc && pc.needPing {
			// The writer dials a new connection if need be; go-redis
			// resubscribes every channel on it before the barrier.
			pc.wake()
		}
		n.mu.Unlock()
	}
}

func (n *notifier) dispatchLocked(pc *pubsubConn, msg any) {
	switch m := msg.(type) {
	case *redis.Message:
		// "" wakes every waiter; "<id> <fence>" is a handoff to waiter id.
		name, _ := strings.CutSuffix(m.Channel, n.suffix)
		if cs := pc.chans[name]; cs != nil {
			id, fence, _ := strings.Cut(m.Payload, " ")
			for w := range cs.waiters {
				switch {
				case m.Payload == "" || w.id == "":
					w.signal()
				case id == w.id:
					if f, err := strconv.ParseUint(fence, 10, 64); err == nil {
						w.handed.Store(f)
					}
					w.signal()
				}
			}
		}
	case *redis.Pong:
		v, ok := strings.CutPrefix(m.Payload, barrierPrefix)
		if !ok {
			return
		}
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return
		}
		for _, cs := range pc.chans {
			if cs.readySeq == 0 || cs.readySeq > seq {
				continue
			}
			cs.readySeq = 0
			closeOnce(cs.ready)
			if cs.rewake {
				cs.rewake = false
				for w := range cs.waiters {
					w.signal()
				}
			}
		}
	}
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
