package redislock

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// combiner sends the scripts of one Locker's concurrent calls to a node
// together, in one pipeline, when they would otherwise queue for the wire:
// "automatic pipelining", as Redisson (over Netty) and rueidis do it.
//
// Why: on the common deployment (client and redis-server sharing cores, or
// a network between them) a lock's cost is mostly per round trip, not per
// command: each command alone is a write and a read on both sides plus an
// event-loop pass on the server (measured here: ~13 µs of redis-server CPU
// per round trip against 2-9 µs to run lockgov's scripts; see
// docs/BENCHMARKS.md). Sixteen goroutines taking sixteen different locks
// through one Locker send sixteen commands in one write and read sixteen
// replies in one read.
//
// How: no goroutine of its own. A call that finds fewer than maxInFlight
// sends under way sends its command itself, exactly as go-redis alone
// would (same context, same hooks, same retries): with one goroutine, or
// little concurrency, nothing changes. A call that finds maxInFlight sends
// under way queues; the first send to finish takes the whole queue as the
// next batch and hands it to the oldest queued call, which sends it as one
// pipeline and wakes the others with their replies. A batch of one is sent
// as a plain command.
//
// Semantics kept: every command is the one its call built, run once per
// send; go-redis retries a pipeline whose reply was lost as a whole, as it
// would retry each command alone, and the scripts are idempotent for that
// (acquire.lua recognises its own token; release.lua leaves a tombstone,
// which a batch makes live as long as the batch can be resent: see send).
// A call whose context ends while it is still queued leaves the queue and
// returns the context's error, its command never sent. A call whose command
// is already in a batch waits for the batch (bounded by the client's read
// and write timeouts, or the batch's deadline), as a call in go-redis waits
// for its command on the wire; its result then stands, which is better than
// an error for a lock that was in fact taken. The batch runs under the
// latest deadline of its calls, detached from their cancellation, so that
// one caller giving up does not fail the others' commands. Its WAIT
// (WithReplicaAcks), which every call of the batch waits for, is cut to
// the earliest, and a call whose deadline would cut it is sent alone
// instead (apart): no caller waits for a WAIT past its own deadline.
type combiner struct {
	c redis.UniversalClient
	// acks, when on, is the WAIT that follows the commands that ask for it
	// (WithReplicaAcks): in their pipeline, on their connection.
	acks replicaAcks
	wait []any // WAIT's command line, boxed once
	// tombCap bounds the tombstones of the releases sent through it
	// (tombstoneTTL): maxTombstoneTTL, shorter only in a test of this
	// Locker's own (export_test.go's SetTombstoneCap), never shared.
	tombCap time.Duration

	mu       sync.Mutex
	inFlight int       // sends under way (plain commands and batches)
	queue    []*queued // calls waiting for a batch, oldest first
}

// maxInFlight is how many sends of one Locker to one node may be under way
// at once before calls queue for a batch: enough that the server has the
// next batch while the client reads the last one's replies, few enough
// that calls still meet in batches, and it leaves connections of the
// client's pool to everything else that uses it. Measured with 16
// goroutines on two cores shared with redis-server (bench/, governed pairs
// with spans): 3 kept 1.58 cores busy against 1.49 with 2, and more sends
// than 3 paid more redis-server CPU per pair than they gained.
const maxInFlight = 3

// maxBatch bounds one pipeline; the rest of the queue goes in the next.
const maxBatch = 128

// queued is one call waiting for a batch.
type queued struct {
	ctx    context.Context
	cmd    redis.Cmder
	window *int64        // cmd's resend window argument (release.lua's tombstone TTL), or nil
	ack    *ackReply     // where the WAIT after cmd answers, or nil: cmd asks for no WAIT
	done   chan struct{} // one send: the reply is in cmd, or batch is this call's to send
	batch  []*queued     // set when this call leads the batch it is in
	taken  bool          // in a batch (under combiner.mu): it can no longer leave
}

var queuedPool = sync.Pool{New: func() any { return &queued{done: make(chan struct{}, 1)} }}

func newCombiner(c redis.UniversalClient, acks replicaAcks) *combiner {
	b := &combiner{c: c, acks: acks, tombCap: maxTombstoneTTL}
	if acks.on() {
		b.wait = []any{"wait", acks.n, acks.waitMs()}
	}
	return b
}

// Process runs cmd, alone or in a batch with other calls', and returns its
// error (also in cmd.Err()).
func (b *combiner) Process(ctx context.Context, cmd redis.Cmder) error {
	return b.process(ctx, cmd, nil, nil)
}

// process is Process for a command one of whose arguments, *window, is in
// milliseconds how long a trace of its run must live for a resend of it to
// recognise that run, computed from ctx by tombstoneTTL: a batch raises it
// to its own (see send). window is nil for other commands.
//
// ack, if not nil (and b.acks on), asks for a WAIT after cmd, in one
// pipeline with it: its answer goes to *ack. A batch that holds such
// commands ends with one WAIT, which covers every command before it on
// the connection (WAIT counts the replication offset of the connection's
// last write).
func (b *combiner) process(ctx context.Context, cmd redis.Cmder, window *int64, ack *ackReply) error {
	if !b.acks.on() {
		ack = nil
	}
	b.mu.Lock()
	if b.inFlight < maxInFlight {
		b.inFlight++
		b.mu.Unlock()
		if ack == nil {
			_ = b.c.Process(ctx, cmd)
		} else {
			b.sendAcked(ctx, cmd, ack)
		}
		b.finish()
		return cmd.Err()
	}
	p := queuedPool.Get().(*queued)
	p.ctx, p.cmd, p.window, p.ack = ctx, cmd, window, ack
	b.queue = append(b.queue, p)
	b.mu.Unlock()

	select {
	case <-p.done:
	case <-ctx.Done():
		b.mu.Lock()
		if !p.taken {
			b.remove(p)
			b.mu.Unlock()
			p.put()
			// The command's error is what callers read (go-redis sets it
			// on every command it fails).
			cmd.SetErr(context.Cause(ctx))
			return cmd.Err()
		}
		b.mu.Unlock()
		<-p.done // in a batch already: it is being sent, or this call leads it
	}
	if batch := p.batch; batch != nil {
		b.send(batch)
		for _, q := range batch[1:] {
			q.done <- struct{}{}
		}
		if b.finish() {
			// The next batch's lead was just made runnable on this P, where
			// it would wait until this goroutine blocks again (after the
			// caller's whole critical section and its next call) while the
			// batch sits unsent. Yield so that it goes out now.
			runtime.Gosched()
		}
	}
	p.put()
	return cmd.Err()
}

// finish ends one send: the queue, if any, becomes the next batch and its
// oldest call sends it (the send stays counted; finish reports true);
// otherwise one send fewer.
func (b *combiner) finish() bool {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return false
	}
	n := min(len(b.queue), maxBatch)
	batch := make([]*queued, n)
	copy(batch, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	for _, q := range batch {
		q.taken = true
	}
	var alone []*queued
	if b.acks.on() && n > 1 {
		batch, alone = b.apart(batch)
	}
	if len(batch) == 0 {
		batch, alone = alone[:1], alone[1:]
	}
	lead := batch[0]
	lead.batch = batch
	// Each call sent alone is one send more, which its finish ends.
	b.inFlight += len(alone)
	for _, q := range alone {
		q.batch = []*queued{q}
	}
	b.mu.Unlock()
	lead.done <- struct{}{}
	for _, q := range alone {
		q.done <- struct{}{}
	}
	return true
}

// apart splits the calls of a batch of a Locker with WithReplicaAcks into
// those that stay in it and those sent alone: the calls whose deadline
// would cut the batch's WAIT (it leaves less than the ack timeout plus
// waitReplyMargin). Every call of a batch reads its reply after the
// batch's one WAIT, and that WAIT is given the ack timeout when the calls
// that stay leave it that: a call with an earlier deadline would wait for
// it up to the timeout past its own. Sent alone, its WAIT (if it asks for
// one) is cut to its own deadline, as a call that finds no send under way;
// one that asks for none waits for no WAIT. The order of the calls is kept
// (under mu).
func (b *combiner) apart(batch []*queued) (stay, alone []*queued) {
	stay = batch[:0:len(batch)]
	for _, q := range batch {
		if _, cut := b.acks.waitArg(q.ctx); cut {
			alone = append(alone, q)
		} else {
			stay = append(stay, q)
		}
	}
	return stay, alone
}

// send runs a batch's commands: one alone as a plain command under its own
// context, several as one pipeline.
func (b *combiner) send(batch []*queued) {
	if len(batch) == 1 {
		if q := batch[0]; q.ack != nil {
			b.sendAcked(q.ctx, q.cmd, q.ack)
		} else {
			_ = b.c.Process(q.ctx, q.cmd)
		}
		return
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	// go-redis resends the pipeline while the batch's context lives, which
	// is the latest deadline of its calls, not each call's own: a release
	// with 300 ms left, batched with a call that has a minute, is resent
	// after the read timeout, seconds after its own context and the
	// tombstone made for it ended, and reads as not held. So a command's
	// window is raised to the batch's. Sending under the earliest deadline
	// instead would let one caller near its end fail the others' commands,
	// which is why the batch's context is the latest. acquire.lua needs no
	// window: it recognises its token by the lock itself, and a resend
	// after the lock expired takes it afresh or finds it taken, both true.
	var batchWindow int64
	pipe := b.c.Pipeline()
	for _, q := range batch {
		if q.window != nil {
			if batchWindow == 0 {
				batchWindow = tombstoneTTL(ctx, b.tombCap)
			}
			*q.window = max(*q.window, batchWindow)
		}
		_ = pipe.Process(ctx, q.cmd)
	}
	wait, ms := b.batchWait(ctx, batch)
	if wait != nil {
		_ = pipe.Process(ctx, wait)
	}
	// Exec sets every command's result and error, a transport error on each
	// of them when the pipeline failed.
	_, _ = pipe.Exec(ctx)
	if wait != nil {
		for _, q := range batch {
			if q.ack != nil {
				q.ack.n, q.ack.err, q.ack.ms = wait.Val(), wait.Err(), ms
			}
		}
	}
}

// batchWait is the WAIT that ends a batch, nil when none of its calls asks
// for one, and its timeout: the ack timeout, cut to what the EARLIEST
// deadline of the batch's calls leaves (waitArg), since every one of them
// reads its reply after the WAIT's. apart sent alone the calls whose
// deadline would cut it when the batch was formed, so a cut here is the
// time the batch took to go out since. Each call's ack is marked cut when
// its own deadline cuts the WAIT: that call's failure is its context's
// (checkAcquire), another's is the store's, its replicas given nearly the
// whole timeout.
func (b *combiner) batchWait(ctx context.Context, batch []*queued) (*redis.IntCmd, int64) {
	if !b.acks.on() {
		return nil, 0 // the default path reads no clock
	}
	asked := false
	ms := b.acks.waitMs()
	for _, q := range batch {
		m, cut := b.acks.waitArg(q.ctx)
		if q.ack != nil {
			asked = true
			*q.ack = ackReply{cut: cut}
		}
		ms = min(ms, m)
	}
	if !asked {
		return nil, 0
	}
	if ms == b.acks.waitMs() {
		return redis.NewIntCmd(ctx, b.wait...), ms
	}
	return redis.NewIntCmd(ctx, "wait", b.acks.n, ms), ms
}

// waitCmd is the WAIT for a call sent alone under ctx, its timeout cut to
// what ctx's deadline leaves (replicaAcks.waitArg).
func (b *combiner) waitCmd(ctx context.Context) (cmd *redis.IntCmd, ms int64, cut bool) {
	ms, cut = b.acks.waitArg(ctx)
	if !cut {
		return redis.NewIntCmd(ctx, b.wait...), ms, false
	}
	return redis.NewIntCmd(ctx, "wait", b.acks.n, ms), ms, true
}

// sendAcked runs cmd and a WAIT after it, in one pipeline: on one
// connection, so that WAIT counts the replicas that have cmd's writes. A
// go-redis hook sees a pipeline. A retry resends both, the script as
// idempotent as in any retry.
func (b *combiner) sendAcked(ctx context.Context, cmd redis.Cmder, ack *ackReply) {
	pipe := b.c.Pipeline()
	_ = pipe.Process(ctx, cmd)
	wait, ms, cut := b.waitCmd(ctx)
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx)
	*ack = ackReply{n: wait.Val(), err: wait.Err(), ms: ms, cut: cut}
}

// batchContext is the context a batch is sent under: the first call's
// values (hooks and tracing see one of the callers), none of the calls'
// cancellation, and the latest of their deadlines (none if one has none).
func batchContext(batch []*queued) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, q := range batch {
		dl, ok := q.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}

// remove takes p out of the queue (under mu).
func (b *combiner) remove(p *queued) {
	for i, q := range b.queue {
		if q == p {
			copy(b.queue[i:], b.queue[i+1:])
			b.queue[len(b.queue)-1] = nil
			b.queue = b.queue[:len(b.queue)-1]
			return
		}
	}
}

func (p *queued) put() {
	p.ctx, p.cmd, p.window, p.ack, p.batch, p.taken = nil, nil, nil, nil, nil, false
	queuedPool.Put(p)
}
