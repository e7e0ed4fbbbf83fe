package errchain_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/lockgov/lockgov/instrument/internal/errchain"
	"github.com/lockgov/lockgov/instrument/internal/errchain/errchaintest"
)

type reply string

func (e reply) Error() string { return string(e) }

// multi is a join that is not errors.Join's: any Unwrap() []error.
type multi []error

func (m multi) Error() string   { return fmt.Sprint([]error(m)) }
func (m multi) Unwrap() []error { return m }

// canceled says, through Is, that it is the caller's cancellation.
type canceled struct{}

func (canceled) Error() string        { return "operation was canceled" }
func (canceled) Is(target error) bool { return target == context.Canceled }

type wrapper = errchaintest.Wrapper

// TestIs_AsErrorsIsWithoutItsPanicOrItsBlowup: Is answers as errors.Is on
// errors errors.Is can read (chains, joins, an Is method, nil members);
// with a nil pointer in the chain it reads the rest as if it were nil,
// without a panic; on a DAG of 40 levels that share their members it reads
// each join once, whether target is in it or not.
func TestIs_AsErrorsIsWithoutItsPanicOrItsBlowup(t *testing.T) {
	loading := reply("LOADING Redis is loading the dataset in memory")
	notAcquired := errors.New("lockgov: lock not acquired")
	for _, err := range []error{
		nil, loading, fmt.Errorf("x: %w", notAcquired), errors.Join(loading, fmt.Errorf("y: %w", notAcquired)),
		fmt.Errorf("%w: %w", loading, context.Canceled), multi{nil, wrapper{Err: notAcquired}}, wrapper{}, multi{},
		fmt.Errorf("dial: %w", canceled{}),
	} {
		for _, target := range []error{notAcquired, loading, context.Canceled} {
			if got, want := errchain.Is(err, target), errors.Is(err, target); got != want {
				t.Errorf("Is(%v, %v) = %v, errors.Is = %v", err, target, got, want)
			}
		}
	}
	var nilOp *net.OpError
	var nilMine *errchaintest.NilDeref
	if errchain.Is(fmt.Errorf("x: %w", nilOp), notAcquired) || errchain.Is(nilMine, notAcquired) || errchain.Is(wrapper{Err: nilMine}, notAcquired) {
		t.Error("a nil pointer alone: Is = true")
	}
	if !errchain.Is(errors.Join(nilOp, wrapper{Err: nilMine}, &errchaintest.NilDeref{Err: nilOp, Text: "x"}, fmt.Errorf("x: %w", notAcquired)), notAcquired) {
		t.Error("nil pointers before the target: Is = false")
	}
	for _, leaf := range []error{loading, notAcquired} {
		dag, reads := errchaintest.SharedDAG(t, 40, fmt.Errorf("leaf: %w", leaf), 40)
		if got := errchain.Is(dag, notAcquired); got != (leaf == notAcquired) {
			t.Errorf("a DAG of 40 shared levels over %v: Is = %v", leaf, got)
		}
		if reads.N() == 0 {
			t.Errorf("a DAG of 40 shared levels over %v: no join read", leaf)
		}
	}
}

// TestVisit_BoundedWhereMembersCannotBeToldApart: a DAG of value joins
// (2^40 paths) and a value that wraps itself without end stop at
// MaxSteps (bounded), Is false for a target not in it; a pointer that
// wraps itself is read a few times, until the walk records what it reads;
// a chain of MaxSteps-1 errors is read to its end.
func TestVisit_BoundedWhereMembersCannotBeToldApart(t *testing.T) {
	target := errors.New("target")
	descend := func(error) errchain.Step { return errchain.Descend }
	dag, reads := errchaintest.ValueDAG(t, 40, target)
	if _, bounded := errchain.Visit(dag, descend, nil); !bounded || reads.N() == 0 {
		t.Errorf("a DAG of value joins: bounded %v after %d reads", bounded, reads.N())
	}
	dag, _ = errchaintest.ValueDAG(t, 40, target)
	if errchain.Is(dag, errors.New("absent")) {
		t.Error("a DAG of value joins: Is of an absent target = true")
	}
	if _, bounded := errchain.Visit(errchaintest.Endless(t), descend, nil); !bounded {
		t.Error("a value that wraps another without end: not bounded")
	}
	n := 0
	if stopped, bounded := errchain.Visit(errchaintest.Cycle(), func(error) errchain.Step { n++; return errchain.Descend }, nil); stopped || bounded || n > 64 {
		t.Errorf("a pointer that wraps itself: stopped %v, bounded %v, read %d times, want a few", stopped, bounded, n)
	}
	long := error(target)
	for range errchain.MaxSteps - 1 {
		long = wrapper{Err: long}
	}
	if !errchain.Is(long, target) {
		t.Errorf("target %d wrappers deep: Is = false", errchain.MaxSteps-1)
	}
}

// TestVisit_LeavesAndSkips: leaf is called on each innermost error node
// descended into (an Unwrap that returns nil, a nil pointer or no member
// is innermost), not on one node skipped, nor on what a skipped error
// wraps.
func TestVisit_LeavesAndSkips(t *testing.T) {
	a, b, c := errors.New("a"), errors.New("b"), errors.New("c")
	var nilOp *net.OpError
	skipMe := wrapper{Err: c}
	err := errors.Join(wrapper{}, fmt.Errorf("x: %w", a), wrapper{Err: nilOp}, multi{}, skipMe, multi{nil, b})
	var leaves []string
	errchain.Visit(err, func(e error) errchain.Step {
		if e == error(skipMe) {
			return errchain.Skip
		}
		return errchain.Descend
	}, func(leaf error) { leaves = append(leaves, leaf.Error()) })
	want := []string{"wrapped", "a", "wrapped", "[]", "b"}
	if fmt.Sprint(leaves) != fmt.Sprint(want) {
		t.Errorf("leaves %q, want %q", leaves, want)
	}
}
