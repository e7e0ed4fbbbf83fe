// Package errchaintest builds the errors that errors.Is reads badly, for
// the tests of the code that reads errors with errchain: a nil pointer
// whose methods panic, joins that share their members at every level
// (2^levels paths), joins that are values, an error that wraps itself.
// The shared joins count the reads of their members and fail the test
// past a limit, so that a reading once per path fails at once instead of
// running for 2^levels steps.
package errchaintest

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/lockgov/lockgov/instrument/internal/errchain"
)

// NilDeref is an error type whose every method reads its receiver: a nil
// *NilDeref panics in Error, Unwrap, Is and As, as a nil *net.OpError
// does in Unwrap and Timeout.
type NilDeref struct {
	Err  error
	Text string
}

func (e *NilDeref) Error() string        { return e.Text }
func (e *NilDeref) Unwrap() error        { return e.Err }
func (e *NilDeref) Is(target error) bool { return e.Text == target.Error() }
func (e *NilDeref) As(target any) bool   { _ = e.Text; return false }

// Wrapper wraps one error with a fixed text: a value, not a pointer.
type Wrapper struct{ Err error }

func (w Wrapper) Error() string { return "wrapped" }
func (w Wrapper) Unwrap() error { return w.Err }

// Reads counts the reads of the members of a DAG's joins.
type Reads struct {
	t     testing.TB
	n     atomic.Int64
	limit int64
}

// N is the number of reads so far.
func (r *Reads) N() int64 { return r.n.Load() }

// read counts one read, and fails the test (once) past the limit: the
// join then has no member, which ends any walk.
func (r *Reads) read() bool {
	n := r.n.Add(1)
	if n == r.limit+1 {
		r.t.Errorf("past %d reads of its members: read once per path, or without a bound", r.limit)
	}
	return n <= r.limit
}

type sharedJoin struct {
	members []error
	reads   *Reads
}

func (j *sharedJoin) Error() string { return "join" }
func (j *sharedJoin) Unwrap() []error {
	if !j.reads.read() {
		return nil
	}
	return j.members
}

// SharedDAG returns an error of levels joins over leaf, each join of the
// level below twice, through the wrappers of both kinds (fmt.Errorf's, a
// pointer; Wrapper, a value; errors.Join's): 2^levels paths to leaf. Its
// joins are pointers: a walk that reads each once reads levels of them.
// The test fails once more than limit reads of their members are made.
func SharedDAG(t testing.TB, levels int, leaf error, limit int64) (error, *Reads) {
	r := &Reads{t: t, limit: limit}
	err := leaf
	for i := range levels {
		a, b := err, err
		switch i % 3 {
		case 1:
			a, b = fmt.Errorf("a: %w", err), Wrapper{err}
		case 2:
			a = errors.Join(err, err)
		}
		err = &sharedJoin{members: []error{a, b}, reads: r}
	}
	return err, r
}

type valueJoin struct {
	members []error
	reads   *Reads
}

func (j valueJoin) Error() string { return "join" }
func (j valueJoin) Unwrap() []error {
	if !j.reads.read() {
		return nil
	}
	return j.members
}

// ValueDAG is SharedDAG with joins that are values, not pointers (and
// cannot be map keys: they hold a slice): nothing tells two reads of one
// apart from reads of two, so only errchain.MaxSteps ends a walk of it.
// The test fails past MaxSteps reads.
func ValueDAG(t testing.TB, levels int, leaf error) (error, *Reads) {
	r := &Reads{t: t, limit: errchain.MaxSteps}
	err := leaf
	for range levels {
		err = valueJoin{members: []error{err, err}, reads: r}
	}
	return err, r
}

type endless struct{ reads *Reads }

func (e endless) Error() string { return "endless" }
func (e endless) Unwrap() error {
	if !e.reads.read() {
		return nil
	}
	return endless(e)
}

// Endless returns a value that wraps another like it, without end: only
// errchain.MaxSteps ends a walk of it. The test fails past MaxSteps reads.
func Endless(t testing.TB) error {
	return endless{reads: &Reads{t: t, limit: errchain.MaxSteps}}
}

type cycle struct{ next *cycle }

func (c *cycle) Error() string { return "cycle" }
func (c *cycle) Unwrap() error { return c.next }

// Cycle returns a pointer that wraps itself.
func Cycle() error {
	c := &cycle{}
	c.next = c
	return c
}
