// Package storefail is what instrument, idempotency and quota share about a
// store that cannot be reached: which errors say so (Unavailable), the
// count and log line of every decision taken without the store (Reporter),
// and how long a command whose reply was lost can still be resent
// (ResendWindow).
//
// Only transport failures degrade: a refused or reset connection, a
// timeout, a server that says it is not serving (LOADING, CLUSTERDOWN,
// MASTERDOWN, TRYAGAIN), a client pool that found no connection in time.
// An answer from the store (lock held, fingerprint mismatch, insufficient
// balance, a script error) is never a reason to decide without it, and
// neither is the caller's own context ending.
package storefail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
// go-redis pool's timeout. They are matched by text on the innermost error:
// the client's error types are internal to it.
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
// (its message carries an address, never a key), or nil.
func transport(err error) error {
	if err == nil {
		return nil
	}
	var u unreachable
	if errors.As(err, &u) {
		return u
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return ne
	}
	for _, target := range []error{io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE} {
		if errors.Is(err, target) {
			return target
		}
	}
	leaf := err
	for {
		next := errors.Unwrap(leaf)
		if next == nil {
			break
		}
		leaf = next
	}
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
