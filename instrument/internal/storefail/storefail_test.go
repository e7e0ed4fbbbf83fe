package storefail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockgov/lockgov/instrument/internal/errchain"
	"github.com/lockgov/lockgov/instrument/internal/errchain/errchaintest"
	"github.com/lockgov/lockgov/internal/testenv"
)

type redisReply string

func (e redisReply) Error() string { return string(e) }

func TestUnavailable_OnlyTransportFailures(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connection refused", Addr: "127.0.0.1:1"}}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"dial refused, wrapped", fmt.Errorf("idempotency: begin %q: %w", "k", refused), true},
		{"ECONNREFUSED", fmt.Errorf("x: %w", syscall.ECONNREFUSED), true},
		{"EOF", fmt.Errorf("x: %w", io.EOF), true},
		{"LOADING", fmt.Errorf("x: %w", redisReply("LOADING Redis is loading the dataset in memory")), true},
		{"CLUSTERDOWN", redisReply("CLUSTERDOWN The cluster is down"), true},
		{"pool timeout", errors.New("redis: connection pool timeout"), true},
		{"caller's deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{"caller cancelled", context.Canceled, false},
		{"script error", redisReply("ERR user_script:1: request id reused"), false},
		{"a store answer", errors.New("lockgov: lock not acquired"), false},
		{"a key that looks like a reply", fmt.Errorf("begin %q: %w", "LOADING ", errors.New("mismatch")), false},
		// A quorum that too few nodes answered: a node's own timeout is a
		// DeadlineExceeded, which unmarked reads as the caller's.
		{"nodes' timeouts and a refused dial, joined", fmt.Errorf("x: %w", errors.Join(
			fmt.Errorf("node 0: %w", context.DeadlineExceeded), fmt.Errorf("node 1: %w", refused))), false},
		{"the same, marked Unreachable", fmt.Errorf("x: %w", Unreachable(errors.Join(
			fmt.Errorf("node 0: %w", context.DeadlineExceeded), fmt.Errorf("node 1: %w", refused)))), true},
	} {
		if got := Unavailable(c.err); got != c.want {
			t.Errorf("%s: Unavailable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// multiErr is a join that is not errors.Join's: any Unwrap() []error.
type multiErr []error

func (m multiErr) Error() string   { return fmt.Sprint([]error(m)) }
func (m multiErr) Unwrap() []error { return m }

// TestUnavailable_AJoinIsReadMemberByMember: every member of a join
// (errors.Join, fmt.Errorf with several %w, any Unwrap() []error), at any
// depth, is read as a lone error would be: a LOADING reply joined after a
// store's answer says the store is not serving, as it does alone. When
// members disagree the caller's context ending wins: a context error
// outside an Unreachable mark, in any member, makes the whole error not a
// store failure.
func TestUnavailable_AJoinIsReadMemberByMember(t *testing.T) {
	loading := redisReply("LOADING Redis is loading the dataset in memory")
	clusterDown := redisReply("CLUSTERDOWN The cluster is down")
	notAcquired := errors.New("lockgov: lock not acquired")
	scriptErr := redisReply("ERR user_script:1: request id reused")
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connection refused", Addr: "127.0.0.1:1"}}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"LOADING first", errors.Join(loading, notAcquired), true},
		{"LOADING after a store answer", errors.Join(notAcquired, loading), true},
		{"LOADING after a store answer, wrapped", fmt.Errorf("acquire %q: %w", "k", errors.Join(notAcquired, fmt.Errorf("node 1: %w", loading))), true},
		{"LOADING in a member, wrapped inside it", errors.Join(fmt.Errorf("node 0: %w", loading)), true},
		{"fmt.Errorf with two %w", fmt.Errorf("%w: %w", notAcquired, clusterDown), true},
		{"a join in a join", errors.Join(scriptErr, fmt.Errorf("x: %w", errors.Join(notAcquired, fmt.Errorf("y: %w", clusterDown)))), true},
		{"a join that is not errors.Join's", multiErr{notAcquired, loading}, true},
		{"a refused dial after a store answer", errors.Join(notAcquired, fmt.Errorf("x: %w", refused)), true},
		{"an i/o timeout after a store answer", errors.Join(notAcquired, fmt.Errorf("read: %w", os.ErrDeadlineExceeded)), true},
		{"an Unreachable mark after a store answer", errors.Join(scriptErr, Unreachable(errors.Join(fmt.Errorf("node 0: %w", context.DeadlineExceeded)))), true},
		{"store answers only", errors.Join(notAcquired, scriptErr), false},
		{"a key that looks like a reply, in a member's wrapper", errors.Join(notAcquired, fmt.Errorf("begin %q: %w", "LOADING ", scriptErr)), false},
		{"an empty join", multiErr{}, false},
		// The caller gave up: whatever another member says, nothing is
		// decided without the store.
		{"caller cancelled, then LOADING", errors.Join(context.Canceled, loading), false},
		{"LOADING, then caller cancelled", errors.Join(loading, fmt.Errorf("x: %w", context.Canceled)), false},
		{"caller's deadline deep in a join beside CLUSTERDOWN", errors.Join(clusterDown, fmt.Errorf("a: %w", errors.Join(notAcquired, fmt.Errorf("b: %w", context.DeadlineExceeded)))), false},
		{"caller's deadline beside a refused dial, fmt.Errorf", fmt.Errorf("%w: %w", refused, context.DeadlineExceeded), false},
		// A mark vouches for the context errors inside it (the nodes'
		// own timeouts), not for one beside it.
		{"an Unreachable mark beside the caller's cancel", errors.Join(Unreachable(fmt.Errorf("node 0: %w", refused)), context.Canceled), false},
	} {
		if got := Unavailable(c.err); got != c.want {
			t.Errorf("%s: Unavailable(%q) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestReporter_CountsEveryDecisionLogsOnceAMinuteWithoutTheKey: 100
// degraded decisions in a burst make 100 counts and one log line, which
// names the transport error and not the key in the wrapped error.
func TestReporter_CountsEveryDecisionLogsOnceAMinuteWithoutTheKey(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var buf bytes.Buffer
	r, err := NewReporter(Quota, reg, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// A second component on the same registry shares the collector.
	if _, err := NewReporter(Lock, reg, nil); err != nil {
		t.Fatal(err)
	}
	cause := fmt.Errorf("quota: deduct %q: %w", "secret-merchant-42", syscall.ECONNRESET)
	for range 100 {
		r.Degraded(cause)
	}
	if got := testutil.ToFloat64(r.counter); got != 100 {
		t.Fatalf("counter = %v, want 100", got)
	}
	lines := strings.Count(buf.String(), "\n")
	if lines != 1 || !strings.Contains(buf.String(), "component=quota") || !strings.Contains(buf.String(), "connection reset") {
		t.Fatalf("log = %q; want one line naming the component and the transport error", buf.String())
	}
	if strings.Contains(buf.String(), "secret-merchant-42") {
		t.Fatalf("log line carries the key: %q", buf.String())
	}
}

// TestEnded_ADeadlineThatPassedEndsTheContextBeforeItsTimerFires: a live
// context has not ended; one whose deadline has passed has, with
// DeadlineExceeded, even while Err is still nil; a cancelled one gives its
// cause.
func TestEnded_ADeadlineThatPassedEndsTheContextBeforeItsTimerFires(t *testing.T) {
	live, stop := context.WithTimeout(context.Background(), time.Hour)
	defer stop()
	if err := Ended(live); err != nil {
		t.Fatalf("live context: Ended = %v, want nil", err)
	}
	passed := testenv.DeadlinePassed(t, live, time.Hour)
	if passed.Err() != nil {
		t.Fatal("DeadlinePassed: Err is set, the gap it should hold is gone")
	}
	if err := Ended(passed); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline passed, timer not fired: Ended = %v, want DeadlineExceeded", err)
	}
	cause := errors.New("shutting down")
	cancelled, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := Ended(cancelled); err != cause {
		t.Fatalf("cancelled: Ended = %v, want its cause", err)
	}
}

// TestResendWindow_TheCallersTimeLeftPlusASecondBoundedByTheLimit: the
// bounds come from the test's own clock around the call, so a stall of the
// machine cannot make it fail.
func TestResendWindow_TheCallersTimeLeftPlusASecondBoundedByTheLimit(t *testing.T) {
	if got := ResendWindow(context.Background(), time.Minute); got != time.Minute {
		t.Errorf("no deadline: %v, want the limit 1m0s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dl, _ := ctx.Deadline()
	before := time.Until(dl)
	got := ResendWindow(ctx, time.Minute)
	after := time.Until(dl)
	if got > before+time.Second || got < after+time.Second {
		t.Errorf("5 s deadline: %v, want its time left (%v..%v) plus 1s", got, after, before)
	}
	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	if got := ResendWindow(long, time.Minute); got != time.Minute {
		t.Errorf("an hour's deadline: %v, want the limit 1m0s", got)
	}
	if got := ResendWindow(testenv.DeadlinePassed(t, context.Background(), time.Minute), time.Minute); got != time.Second {
		t.Errorf("a passed deadline: %v, want 1s for a resend still in flight", got)
	}
	if got := ResendWindow(context.Background(), 0); got != time.Millisecond {
		t.Errorf("a zero limit: %v, want 1ms (a valid PX)", got)
	}
}

// wrapper wraps one error with a fixed text: a chain as deep as wanted
// without fmt.Errorf's text growing with it.
type wrapper = errchaintest.Wrapper

// loadingLeaf is a LOADING reply with an Unwrap method that returns nil:
// an innermost error all the same.
type loadingLeaf struct{}

func (loadingLeaf) Error() string { return "LOADING Redis is loading the dataset in memory" }
func (loadingLeaf) Unwrap() error { return nil }

// isCanceled is a library's error that says, through Is, that it is the
// caller's cancellation (as net's "operation was canceled" does).
type isCanceled struct{}

func (isCanceled) Error() string        { return "operation was canceled" }
func (isCanceled) Is(target error) bool { return target == context.Canceled }

// asRefused hands out a refused dial through As only (a client's own
// error type that carries the connection's).
type asRefused struct{}

func (asRefused) Error() string { return "client: no connection" }
func (asRefused) As(target any) bool {
	if p, ok := target.(*net.Error); ok {
		*p = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		return true
	}
	return false
}

// TestUnavailable_EdgesOfAJoin: what a join can hold besides plain
// members, each read by the precedence of the package doc. Nil members
// (an Unwrap() []error that returns some) are skipped, as errors.Is skips
// them; a wrapper whose Unwrap returns nil is an innermost error; context
// errors found through an Is method count as context errors (rule 1, the
// caller gave up), transport failures found through an As method count as
// transport failures; a chain 100 000 wrappers deep, and a join of
// 10 000 members, are read to the end; the store's answers beside a
// transport failure (lock lost, not acquired: errors lock code may join)
// do not make it an answer.
func TestUnavailable_EdgesOfAJoin(t *testing.T) {
	loading := redisReply("LOADING Redis is loading the dataset in memory")
	masterDown := redisReply("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'")
	tryAgain := redisReply("TRYAGAIN Multiple keys request during rehashing of slot")
	lockLost := errors.New("lockgov: lock lost")
	notAcquired := errors.New("lockgov: lock not acquired")
	deep := func(depth int, leaf error) error {
		err := leaf
		for range depth {
			err = wrapper{Err: err}
		}
		return err
	}
	wide := func(n int, last error) error {
		m := make(multiErr, n)
		for i := range m {
			m[i] = notAcquired
		}
		m[n-1] = last
		return m
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil members around LOADING", multiErr{nil, loading, nil}, true},
		{"only nil members", multiErr{nil, nil}, false},
		{"nil members, a cancel and LOADING", multiErr{nil, context.Canceled, nil, loading}, false},
		{"a wrapper that unwraps to nil", wrapper{Err: nil}, false},
		{"an error whose Unwrap returns nil, its own text a reply", loadingLeaf{}, true},
		{"MASTERDOWN beside ErrLockLost", errors.Join(lockLost, masterDown), true},
		{"TRYAGAIN beside ErrNotAcquired, several %w", fmt.Errorf("%w (%w)", notAcquired, tryAgain), true},
		{"a cancellation through Is, beside LOADING", errors.Join(loading, fmt.Errorf("dial: %w", isCanceled{})), false},
		{"a refused dial through As", fmt.Errorf("x: %w", asRefused{}), true},
		{"a refused dial through As, beside a cancellation through Is", errors.Join(asRefused{}, isCanceled{}), false},
		{"a net.OpError wrapping the caller's cancel", &net.OpError{Op: "dial", Net: "tcp", Err: isCanceled{}}, false},
		{"LOADING 100000 wrappers deep", deep(100000, loading), true},
		{"the caller's deadline 100000 wrappers deep beside LOADING", errors.Join(loading, deep(100000, context.DeadlineExceeded)), false},
		{"LOADING last of 10000 members", wide(10000, loading), true},
		{"a cancel last of 10000 members, LOADING first", append(multiErr{loading}, wide(10000, context.Canceled).(multiErr)...), false},
		{"a mark deep in a join beside answers", errors.Join(notAcquired, deep(1000, Unreachable(errors.New("3 of 3 nodes out of reach")))), true},
		{"a mark deep in a join beside the caller's deadline", errors.Join(deep(1000, Unreachable(errors.New("3 of 3 nodes out of reach"))), context.DeadlineExceeded), false},
	} {
		if got := Unavailable(c.err); got != c.want {
			t.Errorf("%s: Unavailable = %v, want %v", c.name, got, c.want)
		}
	}
}

// asNilOpError hands out a nil *net.OpError through As: a net.Error that
// is no failure.
type asNilOpError struct{}

func (asNilOpError) Error() string { return "client: no connection" }
func (asNilOpError) As(target any) bool {
	if p, ok := target.(*net.Error); ok {
		*p = (*net.OpError)(nil)
		return true
	}
	return false
}

// TestUnavailable_ATypedNilAnywhereInTheChainIsNoError: a nil pointer of
// an error type (the classic `var e *T; return e`), anywhere in an error,
// is read as a nil member: it says nothing, and none of its methods is
// called, since they may dereference it (a nil *net.OpError panics in
// Unwrap and Timeout). What is beside it is read as it would be alone.
// The Reporter's log line reads the error too.
func TestUnavailable_ATypedNilAnywhereInTheChainIsNoError(t *testing.T) {
	loading := redisReply("LOADING Redis is loading the dataset in memory")
	notAcquired := errors.New("lockgov: lock not acquired")
	var nilOp *net.OpError
	var nilMine *errchaintest.NilDeref
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"a nil *net.OpError alone", nilOp, false},
		{"a nil *net.OpError, wrapped", fmt.Errorf("dial: %w", nilOp), false},
		{"a nil *net.OpError beside a store answer", errors.Join(notAcquired, nilOp), false},
		{"a nil *net.OpError beside LOADING", errors.Join(nilOp, fmt.Errorf("x: %w", loading)), true},
		{"a nil *net.OpError before the caller's cancel", errors.Join(fmt.Errorf("x: %w", nilOp), context.Canceled, loading), false},
		{"a nil *net.OpError as a wrapper's cause", wrapper{Err: nilOp}, false},
		{"a real refused dial wrapping a nil *net.OpError", &net.OpError{Op: "dial", Net: "tcp", Err: nilOp}, true},
		{"a nil pointer whose every method panics", nilMine, false},
		{"the same, as a member of a join beside LOADING", multiErr{nilMine, loading}, true},
		{"the same, under a live one of its type", &errchaintest.NilDeref{Err: nilMine, Text: "LOADING x"}, true},
		{"the same, deep in a join in a join", errors.Join(notAcquired, fmt.Errorf("a: %w", errors.Join(wrapper{Err: nilMine}, nilOp))), false},
		{"a nil *net.OpError handed out by As", fmt.Errorf("x: %w", asNilOpError{}), false},
		{"an Unreachable mark beside a nil *net.OpError", errors.Join(nilOp, Unreachable(errors.New("3 of 3 nodes out of reach"))), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Unavailable(c.err); got != c.want {
				t.Errorf("Unavailable = %v, want %v", got, c.want)
			}
			r, err := NewReporter(Lock, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			r.Degraded(c.err)
		})
	}
}

// TestUnavailable_ADAGSharingMembersIsWalkedOncePerMember: an error whose
// joins share their members at every level (40 levels, each a join of
// the level below, twice, through wrappers of both kinds) has 2^40 paths
// to its innermost error and 40 joins: each join is read once. The
// result is the one the path-by-path reading gives: the leaf read as a
// lone error would be, the caller's cancel beside LOADING winning.
func TestUnavailable_ADAGSharingMembersIsWalkedOncePerMember(t *testing.T) {
	loading := redisReply("LOADING Redis is loading the dataset in memory")
	for _, c := range []struct {
		name string
		leaf error
		want bool
	}{
		{"a store answer", errors.New("lockgov: lock not acquired"), false},
		{"LOADING", loading, true},
		{"a refused dial", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{"the caller's deadline", context.DeadlineExceeded, false},
		{"LOADING, then the caller's cancel", errors.Join(loading, context.Canceled), false},
		{"a nil *net.OpError", (*net.OpError)(nil), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dag, reads := errchaintest.SharedDAG(t, 40, c.leaf, 40)
			if got := Unavailable(errors.Join(errors.New("lockgov: lock not acquired"), dag)); got != c.want {
				t.Errorf("Unavailable = %v, want %v", got, c.want)
			}
			if reads.N() == 0 {
				t.Error("no join read")
			}
		})
	}
}

// hidden is a comparable value that joins what it wraps twice: its hash
// would read all it holds, and panics when that holds a slice.
type hidden struct{ err error }

func (h hidden) Error() string   { return "hidden" }
func (h hidden) Unwrap() []error { return []error{h.err, h.err} }

// TestUnavailable_AWalkIsBoundedWhereMembersCannotBeToldApart: a DAG of
// joins that are values (2^40 paths), and a value that wraps another
// like it without end, are read within errchain.MaxSteps errors and answer "not a
// store failure" (a context error may be in what was not read: rule 1's
// doubt), even with LOADING at the leaf or beside. A pointer that wraps
// itself is read once, and what is beside it as it would be alone. A comparable value that holds such a join is
// not hashed (the hash would panic) but read as a value.
func TestUnavailable_AWalkIsBoundedWhereMembersCannotBeToldApart(t *testing.T) {
	loading := redisReply("LOADING Redis is loading the dataset in memory")
	dag, reads := errchaintest.ValueDAG(t, 40, loading)
	if Unavailable(dag) || reads.N() == 0 {
		t.Errorf("a DAG read in part (%d joins): Unavailable = true, want false", reads.N())
	}
	dag, reads = errchaintest.ValueDAG(t, 40, loading)
	if Unavailable(hidden{dag}) || reads.N() == 0 {
		t.Errorf("a DAG read in part (%d joins), under a comparable wrapper: Unavailable = true, want false", reads.N())
	}
	if Unavailable(errchaintest.Endless(t)) || Unavailable(errors.Join(loading, errchaintest.Endless(t))) {
		t.Error("a value that wraps another without end: Unavailable = true, want false")
	}
	c := errchaintest.Cycle()
	if Unavailable(c) || !Unavailable(errors.Join(loading, c)) || Unavailable(errors.Join(loading, c, context.Canceled)) {
		t.Error("a pointer that wraps itself: not read once, beside LOADING (true) and the caller's cancel (false)")
	}
	// A chain as long as the bound allows, then LOADING, is read to the end.
	long := error(loading)
	for range errchain.MaxSteps - 2 {
		long = wrapper{Err: long}
	}
	if !Unavailable(long) {
		t.Errorf("LOADING %d wrappers deep: Unavailable = false, want true", errchain.MaxSteps-2)
	}
}
