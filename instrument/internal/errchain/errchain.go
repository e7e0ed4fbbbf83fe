// Package errchain reads the errors an error wraps, as errors.Is does,
// for code that classifies errors it did not make (a backend's client's,
// the lock function a caller gave FromFunc) on every lock call: without
// errors.Is's panic on a nil pointer in the chain, and without its
// blowup on members shared by many paths. It is stdlib-only, so that
// leasecore can use it.
//
// # Failure modes
//
//   - A nil pointer of an error type, anywhere in an error (the classic
//     `var e *T; return e`), is read as a nil member: it says nothing, and
//     none of its methods is called. errors.Is calls them, and a nil
//     *net.OpError panics in Unwrap.
//   - A pointer reached by several paths (joins that share members) is read
//     once: errors.Is reads it once per path, 2^levels times when every
//     level shares its members. Other values cannot be told apart cheaply
//     (their hash and == read all they hold) and are read once per path.
//   - A walk stops after MaxSteps errors (such values shared at many
//     levels, a value that wraps another like it without end): Is then
//     answers false unless it met target before, and Visit says so.
package errchain

import "reflect"

// MaxSteps bounds the errors one walk reads. Pointers are read once each,
// so only an error larger than this, or one of values (not pointers)
// shared by many paths, or a value that wraps another like it without
// end, reaches it.
const MaxSteps = 1 << 20

// recordAfter is the number of errors a walk reads before it records
// them, when it has met no join: a chain without joins has one path to
// each of its errors, and only one that wraps itself comes back to one.
// Below it, no map is made.
const recordAfter = 16

// Step is what Visit does after reading an error.
type Step int

const (
	Descend Step = iota // read what it wraps
	Skip                // not what it wraps
	Stop                // end the walk
)

// Is reports whether err, or an error it wraps, is target (a comparable
// sentinel such as ErrNotAcquired), as errors.Is does, read as Visit reads
// errors: false past MaxSteps unless target was met before.
func Is(err, target error) bool {
	stopped, _ := Visit(err, func(err error) Step {
		if Matches(err, target) {
			return Stop
		}
		return Descend
	}, nil)
	return stopped
}

// Matches reports whether err itself, not what it wraps, is target: the
// step errors.Is takes on each error of a chain. target's type must be
// comparable (a sentinel): err == target cannot panic then.
func Matches(err, target error) bool {
	if err == target {
		return true
	}
	x, ok := err.(interface{ Is(error) bool })
	return ok && x.Is(target)
}

// Visit calls node on err and on what it wraps, depth first, every member
// of a join (both forms of Unwrap), in the order errors.Is reads them,
// until node says Stop; and leaf (nil: none) on each innermost error that
// node descended into: one whose Unwrap, if any, returns nil, a nil
// pointer or no member. It reports whether node stopped it, or whether
// it stopped at MaxSteps.
//
// Each pointer is read once, however many paths lead to it: reading it
// again would change nothing, since what it holds has been read and had
// node stopped there the walk would have ended. A nil pointer is read as
// a nil member: node is not called on it.
func Visit(err error, node func(error) Step, leaf func(error)) (stopped, bounded bool) {
	var buf [16]error
	stack := append(buf[:0], err)
	var seen map[error]struct{}
	for steps := 0; len(stack) > 0; steps++ {
		if steps == MaxSteps {
			return false, true
		}
		err := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if IsNil(err) {
			continue
		}
		if seen == nil && steps >= recordAfter {
			seen = make(map[error]struct{})
		}
		if seen != nil && !first(seen, err) {
			continue
		}
		switch node(err) {
		case Stop:
			return true, false
		case Skip:
			continue
		}
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			if next := x.Unwrap(); !IsNil(next) {
				stack = append(stack, next)
				continue
			}
		case interface{ Unwrap() []error }:
			if members := x.Unwrap(); len(members) > 0 {
				if seen == nil {
					seen = make(map[error]struct{})
					first(seen, err)
				}
				for i := len(members) - 1; i >= 0; i-- {
					stack = append(stack, members[i])
				}
				continue
			}
		}
		if leaf != nil {
			leaf(err)
		}
	}
	return false, false
}

// IsNil reports whether err is nil or holds a nil pointer (a nil func or
// channel too): a value whose methods may dereference it.
func IsNil(err error) bool {
	if err == nil {
		return true
	}
	switch v := reflect.ValueOf(err); v.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return v.IsNil()
	}
	return false
}

// first reports whether err is not in seen, and adds it. Only pointers
// are recorded, by identity: a value's hash and == read all it holds,
// through its interface fields, so a value nested n deep costs n each
// time (a chain of value wrappers n²), and one that holds a slice in an
// interface panics. Every join of the standard library is a pointer.
func first(seen map[error]struct{}, err error) bool {
	if k := reflect.TypeOf(err).Kind(); k != reflect.Pointer && k != reflect.UnsafePointer {
		return true
	}
	if _, dup := seen[err]; dup {
		return false
	}
	seen[err] = struct{}{}
	return true
}
