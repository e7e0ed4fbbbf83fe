// Package replicaack is WithReplicaAcks of quota, idempotency,
// fence/redisfence and snowflake/workerid: a script followed, in one pipeline on one connection,
// by a write of the record it read or wrote (touch.lua) and WAIT n timeout,
// so that a write the caller is told succeeded has reached n replicas.
// redislock's WithReplicaAcks batches its own WAITs and takes only the
// timeout arithmetic from here (WaitMs, WaitArg, ReplyMargin). It lives in
// the root internal/ (not instrument/internal/) so that snowflake/ can
// import it.
//
// The pitfalls are redislock's (docs/RELIABILITY.md, "replica
// acknowledgements"): WAIT counts the replicas that have the last write of
// its own connection, so it must share the script's pipeline; its timeout
// must leave ReplyMargin under the client's ReadTimeout, since Redis
// answers a WAIT that timed out at its next timer tick; it is cut to the
// caller's deadline; a reply later than the margin all the same (a loaded
// machine) is read until the deadline of the send's context, and a read
// that timed out then is that deadline, with the count unknown
// (Reply.Late), not a store failure; and WAIT is documented to count only
// its own connection's writes, which a script that wrote nothing (a
// replay, a resend after a lost reply) does not have: the touch is that
// write.
package replicaack

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed touch.lua
	touchSrc    string
	touchScript = redis.NewScript(touchSrc)
)

// ReplyMargin is how much later than its timeout a WAIT's reply may arrive:
// Redis ends a WAIT that timed out at its next timer tick, every 1000/hz ms
// (100ms at the default hz 10), and the reply must then reach the client on
// a loaded machine (measured in redislock; its waitReplyMargin is this constant).
const ReplyMargin = 250 * time.Millisecond

// Acks is WithReplicaAcks(N, Timeout); the zero value asks for none. Build
// it with New, once per client, so that Run knows which scripts the
// client's server has run; a literal sends every script with EVALSHA first.
type Acks struct {
	N       int
	Timeout time.Duration
	loaded  *loaded // the scripts the server has run; nil: all taken as loaded
}

// New is WithReplicaAcks(n, timeout) for one client (validate n and timeout
// with Validate).
func New(n int, timeout time.Duration) Acks {
	return Acks{N: n, Timeout: timeout, loaded: &loaded{}}
}

// loaded is the scripts (by SHA1) that an Acks's server has run since the
// last NOSCRIPT it answered. A WAIT pipelined behind an EVALSHA the server
// answers NOSCRIPT waits for a write that did not happen, with too few
// replicas for its whole timeout, and the EVAL sent again then waits its
// own: Run sends a script it does not know loaded with EVAL (its source:
// bytes, not a round trip, and the server caches it), and after a
// NOSCRIPT (a restart, a SCRIPT FLUSH, a failover to a replica that never
// ran it) takes every script as missing, so that a flush costs one wasted
// WAIT, not one per script.
type loaded struct{ m sync.Map }

func (l *loaded) has(s *redis.Script) bool {
	if l == nil {
		return true
	}
	_, ok := l.m.Load(s.Hash())
	return ok
}

// ran records that the server answered s's call without NOSCRIPT: with
// the script's answer, or with an error reply (the script's own, such as
// quota's sold-out: it ran; another, such as LOADING, is at worst one
// wasted WAIT before the NOSCRIPT that forgets it), not with a transport
// error, which says nothing. It stores only a script not yet known: every
// call runs it, and a Load takes no lock where a Store may.
func (l *loaded) ran(s *redis.Script, cmd redis.Cmder) {
	if l == nil || l.has(s) {
		return
	}
	var reply redis.Error
	if err := cmd.Err(); err == nil || (errors.As(err, &reply) && !noScript(err)) {
		l.m.Store(s.Hash(), struct{}{})
	}
}

// lost forgets every script: the server answered NOSCRIPT.
func (l *loaded) lost() {
	if l != nil {
		l.m.Clear()
	}
}

// script queues s on pipe: EVALSHA when the server is known to have it,
// else EVAL.
func (a Acks) script(ctx context.Context, pipe redis.Pipeliner, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if a.loaded.has(s) {
		return s.EvalSha(ctx, pipe, keys, args...)
	}
	return s.Eval(ctx, pipe, keys, args...)
}

// On says acknowledgements are asked for.
func (a Acks) On() bool { return a.N > 0 }

// Validate checks the option's values; opt names it in the error
// ("quota: WithReplicaAcks(0, 1s)").
func Validate(opt string, n int, timeout time.Duration) error {
	if n < 1 {
		return fmt.Errorf("%s: replica count %d must be >= 1 (without WithReplicaAcks nothing waits for replicas)", opt, n)
	}
	if timeout <= 0 {
		return fmt.Errorf("%s: timeout %v must be > 0 (WAIT with 0 would block until the replicas answer)", opt, timeout)
	}
	return nil
}

// CheckClient refuses acks on a client that cannot put WAIT on the
// connection that ran the script, or that would time out reading its
// reply: a *redis.Client (one node, or Sentinel's primary through
// NewFailoverClient) does; a ClusterClient splits a pipeline by slot and
// sends a keyless WAIT to a node of its own choosing, a Ring likewise. pkg
// prefixes the error.
func (a Acks) CheckClient(pkg string, c redis.UniversalClient) error {
	if !a.On() {
		return nil
	}
	rc, ok := c.(*redis.Client)
	if !ok {
		return fmt.Errorf("%s: WithReplicaAcks needs a *redis.Client (one node, or Sentinel through NewFailoverClient), not %T: WAIT must run on the connection and node that ran the script", pkg, c)
	}
	if rt := rc.Options().ReadTimeout; rt > 0 && time.Duration(a.WaitMs())*time.Millisecond > rt-ReplyMargin {
		return fmt.Errorf("%s: WithReplicaAcks timeout %v must be at most %v: the client's ReadTimeout %v less %v for the WAIT's late reply (Redis answers a WAIT that timed out at its next timer tick)", pkg, a.Timeout, max(rt-ReplyMargin, 0), rt, ReplyMargin)
	}
	return nil
}

// WaitMs is the timeout in whole milliseconds, rounded up: WAIT n 0 blocks.
func (a Acks) WaitMs() int64 {
	return int64((a.Timeout + time.Millisecond - 1) / time.Millisecond)
}

// WaitArg is WAIT's timeout in milliseconds for a send under ctx on
// behalf of caller, and whether caller's deadline cut it: at most what
// each deadline leaves after ReplyMargin, at least a millisecond. The
// send's own deadline (idempotency's write of a result, which outlives the
// caller's, ends with the lease) bounds the read of the WAIT's reply too: a
// WAIT longer than it would time the whole pipeline out, and go-redis
// would report the script, which ran, as failed.
func (a Acks) WaitArg(ctx, caller context.Context) (ms int64, cut bool) {
	ms = a.WaitMs()
	left := func(c context.Context) (int64, bool) {
		dl, ok := c.Deadline()
		if !ok {
			return 0, false
		}
		return int64((time.Until(dl) - ReplyMargin) / time.Millisecond), true
	}
	if l, ok := left(caller); ok && l < ms {
		ms, cut = l, true
	}
	if l, ok := left(ctx); ok && l < ms {
		ms, cut = l, false
	}
	return max(ms, 1), cut
}

// Reply is what the touch and the WAIT after a script said.
type Reply struct {
	Acked   int64         // replicas that acknowledged; 0 when the touch wrote nothing or the reply was late
	Err     error         // the touch's or WAIT's own error (a transport error)
	Timeout time.Duration // the timeout WAIT was sent with
	Cut     bool          // the caller's deadline cut it
	// Late says the deadline of the send's context passed before the
	// WAIT's reply arrived, and the read timed out on it: the WAIT was cut
	// by that deadline, and how many replicas have the write is unknown.
	// Err is then nil, and LateErr is the read's error (for the text
	// only: it is the deadline, not the store, that ended the read).
	Late    bool
	LateErr error
}

// Run runs s on keys with args, then touch.lua on record, then WAIT, in one
// pipeline sent under ctx, and returns the script's command (read it as
// Script.Run's) and what the touch and WAIT said. The WAIT's timeout is cut
// to caller's deadline (the caller's context, which is ctx unless the
// write must outlive it: idempotency stores fn's result after the caller's
// deadline, under one of the lease) and to ctx's, which bounds the read of
// its reply. A script the server is not known to have (an Acks from New
// that has not seen it run since the last NOSCRIPT) goes out with EVAL,
// so that no WAIT waits behind a NOSCRIPT. A script the server does not
// have all the same (NOSCRIPT: flushed since) is sent again with EVAL, in
// a pipeline of its own with the touch and a WAIT given what the first
// one left of the timeout (Reply.Timeout is that WAIT's); a touch it
// does not have alone is sent again with a WAIT, without the script, which
// has run: a second run would be a replay, and a first deduction counted
// as one. A WAIT's reply that had not arrived when ctx's deadline passed
// (go-redis timed the read out there) is Reply.Late, not Reply.Err.
func (a Acks) Run(ctx, caller context.Context, c redis.UniversalClient, s *redis.Script, keys []string, record string, args ...any) (*redis.Cmd, Reply) {
	pipe := c.Pipeline()
	cmd := a.script(ctx, pipe, s, keys, args...)
	touch := a.script(ctx, pipe, touchScript, []string{record})
	wait, ms, cut := a.wait(ctx, caller, pipe, 0)
	sent := time.Now()
	_, _ = pipe.Exec(ctx)
	if noScript(cmd.Err()) || noScript(touch.Err()) {
		a.loaded.lost()
	}
	switch {
	case noScript(cmd.Err()):
		pipe = c.Pipeline()
		cmd = s.Eval(ctx, pipe, keys, args...)
		touch = touchScript.Eval(ctx, pipe, []string{record})
		wait, ms, cut = a.wait(ctx, caller, pipe, time.Since(sent))
		_, _ = pipe.Exec(ctx)
	case noScript(touch.Err()):
		// The write that follows the record in the replication stream may
		// come from another connection: WAIT then counts that one's.
		pipe = c.Pipeline()
		touch = touchScript.Eval(ctx, pipe, []string{record})
		wait, ms, cut = a.wait(ctx, caller, pipe, time.Since(sent))
		_, _ = pipe.Exec(ctx)
	}
	heard(cmd)
	a.loaded.ran(s, cmd)
	a.loaded.ran(touchScript, touch)
	r := Reply{Acked: wait.Val(), Timeout: time.Duration(ms) * time.Millisecond, Cut: cut}
	switch touched, err := touch.Int(); {
	case late(ctx, touch.Err(), wait.Err()):
		r.Acked, r.Late, r.LateErr = 0, true, wait.Err()
	case wait.Err() != nil:
		r.Err = wait.Err()
	case err != nil:
		r.Err = err
	case touched == 0:
		// Nothing written on this connection since the script, which may
		// have written nothing either: the count says nothing of it.
		r.Acked = 0
	}
	return cmd, r
}

// wait queues on pipe the WAIT for a send under ctx, its timeout cut to
// caller's deadline and to what spent, the time since the call's first
// pipeline went out, left of the timeout: a WAIT behind a NOSCRIPT, which
// with too few replicas waited its whole timeout for nothing, leaves the
// WAIT of the EVAL sent again the rest (at least a millisecond), so that
// the call's WAITs together take the timeout, not twice it.
func (a Acks) wait(ctx, caller context.Context, pipe redis.Pipeliner, spent time.Duration) (wait *redis.IntCmd, ms int64, cut bool) {
	ms, cut = a.WaitArg(ctx, caller)
	if left := a.WaitMs() - int64(spent/time.Millisecond); left < ms {
		ms, cut = max(left, 1), false
	}
	wait = redis.NewIntCmd(ctx, "wait", a.N, ms)
	_ = pipe.Process(ctx, wait)
	return wait, ms, cut
}

// heard clears the error go-redis put on a script it had heard answer: a
// pipeline whose later reply (the WAIT's) is lost fails as a whole, and
// go-redis stamps that transport error on every command that had none, the
// answered script's included, once it stops retrying (with retries off, at
// once). The answer is still the command's value (a reply that was not read
// leaves none). Without this, a script that ran on the primary read as
// one that may not have: quota's WithFallback deducted it a second time and
// idempotency's FailOpen ran fn beside a claim that held the key. The WAIT
// keeps its error, so the caller hears ErrNotReplicated with it.
func heard(cmd *redis.Cmd) {
	if err := cmd.Err(); err != nil && cmd.Val() != nil {
		cmd.SetErr(nil)
	}
}

// late reports whether the touch's and WAIT's errors say that their
// replies were not read before ctx's deadline: a WAIT's reply may arrive
// later than ReplyMargin after its timeout (Redis answers at its next
// timer tick, and a loaded machine delays the reply further), and a
// client that takes its read deadline from ctx (ContextTimeoutEnabled)
// then times the read out at ctx's deadline. The WAIT was cut by that
// deadline; the store did not fail. A timeout while ctx's deadline is
// still ahead (the client's own ReadTimeout), or any other error (a reset
// connection), is the store's and is not late.
func late(ctx context.Context, touchErr, waitErr error) bool {
	if waitErr == nil || !timedOut(waitErr) || (touchErr != nil && !timedOut(touchErr)) {
		return false
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// timedOut reports whether err is a read or write that timed out (a
// net.Error's Timeout) or a context's deadline (go-redis's retry of the
// pipeline, stopped by it).
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func noScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// Check returns nil when r says at least a.N replicas have the write, else
// the caller's error: notReplicated (the package's typed error with r's
// counts) alone when the replicas did not answer within the timeout; with
// context.DeadlineExceeded when the caller's deadline cut the timeout, or
// when the WAIT's reply came after the deadline (r.Late: then with 0
// acknowledged and a text saying the count is unknown, never the read's
// timeout as an error that reads as a store failure); with the touch's or
// WAIT's own error when that failed (then sentinel, the package's
// ErrNotReplicated, and that error: the counts are unknown).
func (a Acks) Check(r Reply, sentinel error, notReplicated func(acked, wanted int, timeout time.Duration) error) error {
	if !a.On() {
		return nil
	}
	if r.Late {
		return fmt.Errorf("%w: %w (the WAIT's reply had not arrived when the deadline passed: how many replicas have the write is unknown; %v)", context.DeadlineExceeded, notReplicated(0, a.N, r.Timeout), r.LateErr)
	}
	if r.Err != nil {
		return fmt.Errorf("%w: WAIT %d %v: %w", sentinel, a.N, a.Timeout, r.Err)
	}
	if r.Acked >= int64(a.N) {
		return nil
	}
	e := notReplicated(int(r.Acked), a.N, r.Timeout)
	if r.Cut {
		return fmt.Errorf("%w: %w (the timeout %v cut to fit the context's deadline)", context.DeadlineExceeded, e, a.Timeout)
	}
	return e
}
