// Package storefail is what instrument, idempotency and quota share about a
// store that cannot be reached: which errors say so (Unavailable), the
// count and log line of every decision taken without the store (Reporter),
// and how long a command whose reply was lost can still be resent
// (ResendWindow).
//
// Only transport failures degrade: a refused or reset connection, a
// timeout, a server that says it is not serving (LOADING, CLUSTERDOWN,
// MASTERDOWN, TRYAGAIN), a client pool that found no connection in time.
// (redislock reads a lock's TRYAGAIN itself: its slot is moving, which it
// answers as contention, ErrNotAcquired, with the reply in the text only.)
// An answer from the store (lock held, fingerprint mismatch, insufficient
// balance, a script error) is never a reason to decide without it, and
// neither is the caller's own context ending.
//
// # Joined errors
//
// An error may hold several: errors.Join, fmt.Errorf with more than one
// %w, any error with an Unwrap() []error method, at any depth (the nodes
// of a quorum; lock code under instrument.FromFunc that joins its client's
// error with ErrNotAcquired, in either order). Unavailable reads every
// member as it would read that member alone, the reply prefixes (LOADING
// and the like) on the innermost error of each, and when the members
// disagree it decides in this order:
//
//  1. A context.Canceled or context.DeadlineExceeded in any member,
//     outside an Unreachable mark: not a store failure, whatever the other
//     members say. An unmarked context error may be the caller's, and a
//     caller that gave up is not answered by a decision taken without the
//     store. That decision is the one that can go wrong (FailOpen's
//     process-local lock does not exclude another process holding the
//     store's), so a doubt never leads to it: it costs the caller an error
//     it would have got anyway.
//  2. Otherwise, any member that is a transport failure, or is marked
//     Unreachable, makes the whole a store failure: a store answer beside
//     it (ErrNotAcquired that lock code joined, an error reply) does not
//     say that the store answered the call. A store of several nodes for
//     which some nodes out of reach are no failure of the whole (a quorum
//     that a majority answered) keeps their errors out of the chain.
//  3. Otherwise (only answers, or nothing recognised) it is not.
//
// An Unreachable mark vouches for what it wraps only: the context errors
// inside it are the nodes' own timeouts, told apart from the caller's
// (Ended) by whoever marked them; one beside it is read by rule 1.
//
// Unavailable runs on the error path of every governed lock call, so no
// error makes it panic or take long, where errors.Is would do either: it
// reads err with errchain. A nil pointer of an error type, anywhere in
// err, is read as a nil member (it says nothing; its methods, which may
// dereference it, are not called). A pointer reached by several paths
// (joins that share members) is read once. Other values are read once per
// path, and a reading past errchain.MaxSteps errors (only such values
// shared at many levels, or a value that wraps another like it without
// end) stops and answers false: what was not read may hold a context
// error, and in doubt rule 1 decides.
package storefail

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/instrument/internal/errchain"
	"github.com/lockgov/lockgov/internal/telemetry"
)

// LogEvery is the shortest interval between two log lines of one Reporter.
const LogEvery = time.Minute

// Components: the values of the component label.
const (
	Lock        = "lock"
	Idempotency = "idempotency"
	Quota       = "quota"
)

// serverBusy are the prefixes of Redis replies that mean "not serving now"
// (loading a data set, cluster or replication down, a slot moving), and the
// go-redis pool's timeout. They are matched by text on the innermost error
// (of each member of a join): the client's error types are internal to it.
var serverBusy = []string{"LOADING ", "CLUSTERDOWN ", "MASTERDOWN ", "TRYAGAIN ", "redis: connection pool timeout"}

// Unavailable reports whether err says the store could not be reached or
// did not answer in time. Context errors are not: a caller whose context
// ended has nothing left to decide.
func Unavailable(err error) bool {
	return transport(err) != nil
}

// Ended returns why ctx has ended: its cause, or context.DeadlineExceeded
// once its deadline has passed even though the timer that cancels it has not
// run yet. The store's answer to a request that carried the deadline can
// arrive in that gap: a read deadline taken from ctx ("i/o timeout"), or
// etcd's own "request timed out" from the server's copy of the deadline. On
// a loaded machine the gap is long enough to matter; reading ctx.Err() alone
// there would take the caller's give-up for a store failure.
func Ended(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// Unreachable marks err as the store out of reach, for Unavailable to
// recognise whatever err holds: the error of a store made of several nodes
// (a quorum) that too few of them answered, each of the others for a
// transport failure or for its own timeout. Such a timeout is a
// context.DeadlineExceeded too, which Unavailable would otherwise take for
// the caller's: the caller tells its own apart with Ended before it marks.
// err's message must carry addresses, never a key: the Reporter logs it.
func Unreachable(err error) error { return unreachable{err} }

type unreachable struct{ error }

func (e unreachable) Unwrap() error { return e.error }

// transport returns the part of err that says the store is unreachable
// (its message carries an address, never a key), or nil. It reads err and
// every error it wraps, every member of a join, with the precedence the
// package doc gives.
func transport(err error) error {
	found, contextEnded := walk(err)
	if contextEnded {
		return nil
	}
	return found
}

// walk reads err and what it wraps (errchain.Visit: each pointer once, no
// method of a nil pointer), and reports whether it met a context error
// outside an Unreachable mark, stopping there, or reached
// errchain.MaxSteps (what is not read may hold one: in doubt, rule 1),
// and returns the first sign of a transport failure it met. An
// Unreachable mark is such a sign, and what it wraps is not read.
func walk(err error) (found error, contextEnded bool) {
	stopped, bounded := errchain.Visit(err, func(err error) errchain.Step {
		if u, ok := err.(unreachable); ok {
			if found == nil {
				found = u
			}
			return errchain.Skip
		}
		if errchain.Matches(err, context.Canceled) || errchain.Matches(err, context.DeadlineExceeded) {
			return errchain.Stop
		}
		if found == nil {
			found = failure(err)
		}
		return errchain.Descend
	}, func(leaf error) {
		if found == nil {
			found = busyReply(leaf)
		}
	})
	if bounded {
		return nil, true
	}
	return found, stopped
}

// failure returns err if err itself, not what it wraps, says the
// connection failed (a net.Error such as a refused dial or a read timeout,
// an EOF, a reset or closed connection), or nil.
func failure(err error) error {
	if ne, ok := err.(net.Error); ok {
		return ne
	}
	if x, ok := err.(interface{ As(any) bool }); ok {
		var ne net.Error
		if x.As(&ne) && !errchain.IsNil(ne) {
			return ne
		}
	}
	for _, target := range []error{io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE} {
		if errchain.Matches(err, target) {
			return target
		}
	}
	return nil
}

// busyReply returns leaf, an innermost error, if its text is a reply that
// says the server is not serving now (serverBusy), or nil. Only the
// innermost error is read: a wrapper's text may carry a key.
func busyReply(leaf error) error {
	for _, p := range serverBusy {
		if strings.HasPrefix(leaf.Error(), p) {
			return leaf
		}
	}
	return nil
}

// Reporter counts the degraded decisions of one component in
// lockgov_store_degraded_total{component} and logs them at most once per
// LogEvery, with how many were taken since the last line. It is safe for
// concurrent use.
type Reporter struct {
	component string
	counter   prometheus.Counter
	logger    *slog.Logger

	mu    sync.Mutex
	last  time.Time
	since int64
}

// NewReporter returns the Reporter of component, its counter registered on
// reg (nil: kept but exported nowhere) and shared with every other
// component registered there. A nil logger means slog.Default().
func NewReporter(component string, reg prometheus.Registerer, logger *slog.Logger) (*Reporter, error) {
	vec := telemetry.StoreDegradedTotal.CounterVec(nil)
	var err error
	telemetry.Register(reg, &vec, &err)
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", telemetry.StoreDegradedTotal.Name, err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Reporter{component: component, counter: vec.WithLabelValues(component), logger: logger}, nil
}

// Degraded records one decision taken without the store because of err.
// The log line names the component, the number of decisions since the
// last line and the transport error (an address, never a key or token).
func (r *Reporter) Degraded(err error) {
	r.counter.Inc()
	now := time.Now()
	r.mu.Lock()
	r.since++
	if !r.last.IsZero() && now.Sub(r.last) < LogEvery {
		r.mu.Unlock()
		return
	}
	n := r.since
	r.since, r.last = 0, now
	r.mu.Unlock()
	cause := "unknown"
	if t := transport(err); t != nil {
		cause = t.Error()
	}
	r.logger.Warn("lockgov: store unreachable, deciding without it (fail open)",
		"component", r.component, "decisions", n, "error", cause)
}

// ResendWindow is how long a record that lets a script recognise a resend of
// its own call must live: go-redis resends a command whose reply was lost
// (a read timeout, a reset connection) until the caller's context ends (it
// sleeps between tries on that context), so the context's time left plus a
// second for a resend still in flight then, never more than limit; limit
// when the context has no deadline. At least a millisecond, so that it can
// be a PX.
func ResendWindow(ctx context.Context, limit time.Duration) time.Duration {
	return ResendWindowAfter(ctx, time.Second, limit)
}

// ResendWindowAfter is ResendWindow with margin in place of its second: how
// long after the caller's deadline a resend sent before it may still run.
// A resend waits in the server's input buffer while the server stalls (a
// fork, a slow command, a paused VM), and runs when the stall ends; a record
// gone by then lets it apply again. Callers for whom a second run creates or
// loses units give it a margin that covers such stalls.
func ResendWindowAfter(ctx context.Context, margin, limit time.Duration) time.Duration {
	d := limit
	if dl, ok := ctx.Deadline(); ok {
		d = min(max(time.Until(dl), 0)+margin, d)
	}
	return max(d, time.Millisecond)
}
