package detectors

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// PartialError is the error of a Detect that read the heartbeats of some
// of its stores and not of others (down, paused, past the deadline): the
// findings returned with it are real, made from what it read; what needs
// the unread stores was not decided. Scopes say what that is, so that a
// caller keeps its earlier findings there (Covers) and takes the new
// ones for the rest. A detector returns findings together with a non-nil
// error only when the error is a *PartialError.
type PartialError struct {
	// Stores are the addresses of the stores whose heartbeats were not
	// read, sorted.
	Stores []string
	// Scopes are what the call could not check: an earlier finding that
	// one of them covers may still stand.
	Scopes []Scope
	// Err is why the stores were not read.
	Err error
}

// Scope is a set of findings: those of Kind, in Store, on Key; an empty
// field matches anything.
type Scope struct {
	Kind, Store, Key string
}

func (s Scope) covers(f Finding) bool {
	return (s.Kind == "" || s.Kind == f.Kind) && (s.Store == "" || s.Store == f.Store) && (s.Key == "" || s.Key == f.Key)
}

// Error names the stores not read and why.
func (e *PartialError) Error() string {
	return fmt.Sprintf("detectors: partial: heartbeats not read on %s: %v", strings.Join(e.Stores, ", "), e.Err)
}

// Unwrap returns Err.
func (e *PartialError) Unwrap() error { return e.Err }

// Covers reports whether f is in one of the scopes the call could not
// check.
func (e *PartialError) Covers(f Finding) bool {
	for _, s := range e.Scopes {
		if s.covers(f) {
			return true
		}
	}
	return false
}

// fleetRead is what readFleet read: the heartbeats and unreadable keys of
// the stores that answered, the addresses of those (read), and the errors
// of the others by address (failed).
type fleetRead struct {
	beats      []beat
	unreadable []unreadableBeat
	read       []string
	failed     map[string]error
}

// partial returns the PartialError of r with scopes, nil when every store
// was read.
func (r *fleetRead) partial(scopes ...Scope) error {
	if len(r.failed) == 0 {
		return nil
	}
	e := &PartialError{Scopes: scopes}
	for addr := range r.failed {
		e.Stores = append(e.Stores, addr)
	}
	sort.Strings(e.Stores)
	errs := make([]error, len(e.Stores))
	for i, addr := range e.Stores {
		errs[i] = r.failed[addr]
	}
	e.Err = errors.Join(errs...)
	return e
}

// storeScopes are scopes of every finding made in the stores not read.
func (r *fleetRead) storeScopes() []Scope {
	var s []Scope
	for addr := range r.failed {
		s = append(s, Scope{Store: addr})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].Store < s[j].Store })
	return s
}

// readFleet reads the heartbeats of every store side by side, in store
// then instance order in its result. The first store is read under ctx;
// when own, its failure is the error (the detector cannot do its work
// without it). The others are read under ctx bounded to half of the time
// it has left, so that a store that does not answer leaves the detector
// the other half for what it does with the rest; a store that fails is in
// failed. When none is read, the error is the first store's.
func readFleet(ctx context.Context, stores []Store, own bool) (*fleetRead, error) {
	type result struct {
		hbs []beat
		bad []unreadableBeat
		err error
	}
	res := make([]result, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			rctx := ctx
			if dl, ok := ctx.Deadline(); ok && i > 0 {
				var cancel context.CancelFunc
				rctx, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
				defer cancel()
			}
			hbs, bad, err := s.heartbeats(rctx)
			r := &res[i]
			r.err = err
			for _, hb := range hbs {
				r.hbs = append(r.hbs, beat{s, hb})
			}
			for _, u := range bad {
				u.store = s.Addr()
				r.bad = append(r.bad, u)
			}
		})
	}
	wg.Wait()
	out := &fleetRead{failed: map[string]error{}}
	for i, s := range stores {
		r := res[i]
		if r.err != nil {
			if own && i == 0 {
				return nil, r.err
			}
			out.failed[s.Addr()] = r.err
			continue
		}
		out.beats = append(out.beats, r.hbs...)
		out.unreadable = append(out.unreadable, r.bad...)
		out.read = append(out.read, s.Addr())
	}
	if len(out.read) == 0 && len(stores) > 0 {
		return nil, res[0].err
	}
	return out, nil
}
