package detectors

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/shellquote"
)

// Deadlock finds distributed deadlocks and lock-order inversions from the
// Held and Waiting lists of heartbeats.
//
// The wait-for graph has one node per waiting goroutine (a heartbeat's
// Waiting entry) and an edge from a waiter to each waiter of another
// instance that holds the key it waits for. When an instance says which
// keys each waiting goroutine holds (HoldsWhileWaiting), only the waiters
// holding that key are targets, so a lock held by a goroutine that is not
// itself waiting closes no cycle; an instance that gives no such list is
// taken as one node (any of its waiters may hold any of its locks). Each
// strongly connected component of the graph with two or more instances is
// one `deadlock` finding naming its instances and keys, once its waits
// provably coexisted (each began before the oldest heartbeat in the cycle
// was sent; beats of different instances are written at different times).
//
// A lock is named by the store the heartbeat listing it was read from (its
// address) and its key: a process's heartbeat in a store lists the locks it
// holds and waits for there, so the same key in two deployments is two
// locks, and only locks of one store meet. A key a waiter holds
// (HoldsWhileWaiting, which may be in another store) is the lock of that
// key the instance holds in any store.
//
// Process-local fallback locks (Fallback in a heartbeat: instrument.FailOpen
// stands one in for the store's lock during an outage) are locks of their
// instance alone: a's fallback lock on k, b's fallback lock on k and the
// store's lock on k are three locks. A fallback wait is blocked only by a
// goroutine of its own instance (holding its fallback lock on the key, or
// the store's lock, which the instance's fallback Acquires wait for too),
// and a fallback hold blocks only its own instance's fallback waiters, so
// such an edge stays inside one instance and is drawn only when the
// instance lists per-goroutine holds; it joins a cycle only through store
// edges to other instances (an instance's goroutine waiting locally for its
// sibling, which waits in the store for another instance). Cycles within
// one instance are not reported, fallback or not.
//
// Lock order: a waiter holding A while waiting for B records "A before B"
// (by pattern when both keys have distinct declared patterns, else by key;
// either way in the stores the locks are in). A fallback lock counts as the
// store's lock it stands in for: the order is the code's, which takes the
// store's locks in that order again when the store is back, so two
// processes taking A and B in opposite orders during an outage are a
// `lock_order_inversion` (though never, through their fallback locks, a
// `deadlock`).
// The detector remembers these orders across calls (WithMemory, bounded to
// MaxOrders pairs), and reports each pair seen in both orders once as
// `lock_order_inversion`, except pairs inside a deadlock it reports.
type Deadlock struct {
	beats  []Store
	cfg    config
	mu     sync.Mutex
	orders map[orderKey]orderSeen
}

// MaxOrders bounds the lock orders a Deadlock detector remembers.
const MaxOrders = 10000

type orderKey struct {
	byPattern   bool
	first, then string // resources, or store-qualified patterns (resource of the pattern)
}

type orderSeen struct {
	instance string
	store    string
	a, b     string // the keys, for the detail
	at       time.Time
}

// NewDeadlock returns the deadlock detector over the heartbeats in s.
// Options: WithHeartbeatsFrom, WithMemory, WithMaxFindings, WithNow.
func NewDeadlock(s Store, opts ...Option) (*Deadlock, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	cfg, err := newConfig(DetectorDeadlock, opts, "WithMemory")
	if err != nil {
		return nil, err
	}
	return &Deadlock{beats: append([]Store{s}, cfg.beats...), cfg: cfg, orders: map[orderKey]orderSeen{}}, nil
}

// Name returns "deadlock".
func (d *Deadlock) Name() string { return DetectorDeadlock }

type dlInstance struct {
	hb    *fleet.Heartbeat
	store Store
	held  map[string]fleet.HeldLock // resource -> lock
	// local are the process-local fallback locks it holds (Fallback), by
	// the resource they stand in for: locks of this instance alone.
	local   map[string]fleet.HeldLock
	waiters []int // indices into nodes
	precise bool  // waiters list HoldsWhileWaiting
}

type dlWaiter struct {
	inst     string
	store    string // address of the store it waits in
	want     string // resource
	key      string
	pattern  string
	since    time.Time
	holdKeys []string        // HoldsWhileWaiting
	holds    map[string]bool // resources
	// fallback: it waits for its instance's process-local lock on want;
	// localHolds are the process-local locks it holds (by resource).
	fallback   bool
	localHolds map[string]bool
}

// resource names a lock across the fleet: the address of the store its
// heartbeat was read from, and its key. Two deployments of one backend
// both have a lock:a; they are two locks.
func resource(store, key string) string { return store + "\x00" + key }

func resourceStore(r string) string { s, _, _ := strings.Cut(r, "\x00"); return s }

// patternNode names a lock pattern in one store (a resource of the
// pattern), for inDeadlock.
func patternNode(store, pattern string) string { return "p\x00" + resource(store, pattern) }

func resourceKey(r string) string { _, k, _ := strings.Cut(r, "\x00"); return k }

// Detect reads the heartbeats once and reports the deadlocks in them and
// the inversions remembered. When some stores' heartbeats cannot be read,
// it reports the cycles of the others whose instances all list their
// per-goroutine holds (of one that does not, an unread beat may have), with
// a *PartialError whose scopes cover every deadlock and inversion.
func (d *Deadlock) Detect(ctx context.Context) ([]Finding, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fr, err := readFleet(ctx, d.beats, false)
	if err != nil {
		return nil, err
	}
	beats := fr.beats
	now := d.cfg.now()
	insts := map[string]*dlInstance{}
	var names []string
	var nodes []dlWaiter
	holders := map[string][]string{} // resource -> instances
	for _, b := range beats {
		in := insts[b.hb.Instance]
		if in == nil {
			in = &dlInstance{hb: b.hb, store: b.store, held: map[string]fleet.HeldLock{}, local: map[string]fleet.HeldLock{}}
			insts[b.hb.Instance] = in
			names = append(names, b.hb.Instance)
		}
		addr := b.store.Addr()
		for _, h := range b.hb.Held {
			r := resource(addr, h.Key)
			if h.Fallback {
				if _, ok := in.local[r]; !ok {
					in.local[r] = h
				}
				continue
			}
			if _, ok := in.held[r]; !ok {
				in.held[r] = h
				holders[r] = append(holders[r], b.hb.Instance)
			}
		}
		for _, w := range b.hb.Waiting {
			n := dlWaiter{inst: b.hb.Instance, store: addr, want: resource(addr, w.Key), key: w.Key, pattern: w.Pattern,
				since: w.Since, holdKeys: w.HoldsWhileWaiting, fallback: w.Fallback}
			if len(w.HoldsWhileWaiting) > 0 {
				in.precise = true
			}
			in.waiters = append(in.waiters, len(nodes))
			nodes = append(nodes, n)
		}
	}
	// A held key a waiter names is the instance's lock on that key, in
	// whichever store its beats list it (the waiter's own when none does).
	for i := range nodes {
		n := &nodes[i]
		if len(n.holdKeys) == 0 {
			continue
		}
		in := insts[n.inst]
		n.holds, n.localHolds = map[string]bool{}, map[string]bool{}
		for _, k := range n.holdKeys {
			found := false
			for r := range in.held {
				if resourceKey(r) == k {
					n.holds[r], found = true, true
				}
			}
			for r := range in.local {
				if resourceKey(r) == k {
					n.localHolds[r], found = true, true
				}
			}
			if !found {
				n.holds[resource(n.store, k)] = true
			}
		}
	}
	sort.Strings(names)
	// Edges.
	adj := make([][]int, len(nodes))
	for i, w := range nodes {
		if w.fallback {
			// Only a goroutine of its own process holds what it waits
			// for: its fallback lock, or the store lease of the key it
			// got before the outage, which fallback Acquires of the
			// process wait for too. Which goroutine is known only from
			// per-goroutine holds; without them the instance is one
			// node, and an edge to itself says nothing.
			in := insts[w.inst]
			if !in.precise {
				continue
			}
			for _, j := range in.waiters {
				if j != i && (nodes[j].localHolds[w.want] || nodes[j].holds[w.want]) {
					adj[i] = append(adj[i], j)
				}
			}
			continue
		}
		for _, hi := range holders[w.want] {
			if hi == w.inst {
				continue
			}
			in := insts[hi]
			for _, j := range in.waiters {
				if !in.precise || nodes[j].holds[w.want] {
					adj[i] = append(adj[i], j)
				}
			}
		}
	}
	out := newCapped(d.cfg.maxFindings)
	inDeadlock := map[string]bool{} // resources and patterns in a reported cycle
	for _, comp := range sccs(adj) {
		instSet := map[string]bool{}
		for _, i := range comp {
			instSet[nodes[i].inst] = true
		}
		if len(instSet) < 2 {
			continue
		}
		if !overlapping(comp, nodes, insts) || (len(fr.failed) > 0 && !allPrecise(comp, nodes, insts)) {
			// (An instance without per-goroutine holds is one node; its
			// beats in an unread store may have said which goroutine holds
			// what, and so that the cycle is none.)
			// A wait in it began after another instance's beat was sent:
			// the beats may show waits that never coexisted. Fresher beats
			// (one publish period) settle it; meanwhile the pair is no
			// inversion to report either.
			for _, i := range comp {
				inDeadlock[nodes[i].want] = true
				if nodes[i].pattern != "" {
					inDeadlock[patternNode(nodes[i].store, nodes[i].pattern)] = true
				}
			}
			continue
		}
		d.deadlockFinding(comp, nodes, insts, now, out, inDeadlock)
	}
	d.remember(nodes, insts, now)
	d.inversions(out, inDeadlock)
	return out.result(DetectorDeadlock, ""), fr.partial(Scope{Kind: KindDeadlock}, Scope{Kind: KindLockOrderInversion})
}

// allPrecise reports whether every instance of a cycle lists which keys
// each of its waiting goroutines holds.
func allPrecise(comp []int, nodes []dlWaiter, insts map[string]*dlInstance) bool {
	for _, i := range comp {
		if !insts[nodes[i].inst].precise {
			return false
		}
	}
	return true
}

func (d *Deadlock) deadlockFinding(comp []int, nodes []dlWaiter, insts map[string]*dlInstance, now time.Time, out *capped, inDeadlock map[string]bool) {
	var instNames, keys, steps []string
	var oldest time.Time
	store := ""
	for _, i := range comp {
		w := nodes[i]
		if !slices.Contains(instNames, w.inst) {
			instNames = append(instNames, w.inst)
		}
		if !slices.Contains(keys, w.key) {
			keys = append(keys, w.key)
		}
		inDeadlock[w.want] = true
		if w.fallback {
			steps = append(steps, fmt.Sprintf("%s waits for %s held by %s (a process-local fallback wait)", w.inst, w.key, w.inst))
		} else {
			var by []string
			for _, hi := range sortedHolders(w.want, insts) {
				if hi != w.inst {
					by = append(by, hi)
				}
			}
			steps = append(steps, fmt.Sprintf("%s waits for %s held by %s", w.inst, w.key, strings.Join(by, ", ")))
		}
		if !w.since.IsZero() && (oldest.IsZero() || w.since.Before(oldest)) {
			oldest = w.since
		}
		if w.pattern != "" {
			inDeadlock[patternNode(w.store, w.pattern)] = true
		}
	}
	sort.Strings(instNames)
	sort.Strings(keys)
	sort.Strings(steps)
	steps = slices.Compact(steps)
	first := insts[instNames[0]]
	store = first.store.Addr()
	var age time.Duration
	if !oldest.IsZero() {
		age = max(now.Sub(oldest), 0)
	}
	var frees []string
	for _, n := range instNames {
		frees = append(frees, holderQuoted(insts[n].hb))
	}
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = shellquote.Quote(k)
	}
	out.add(Finding{
		Detector: DetectorDeadlock, Kind: KindDeadlock, Severity: SeverityCritical, Store: store,
		Key: keys[0], Holder: HolderFromHeartbeat(first.hb), Age: age,
		Detail: fmt.Sprintf("instances %s wait for each other on keys %s: %s",
			strings.Join(instNames, ", "), strings.Join(keys, ", "), strings.Join(steps, "; ")),
		Action: fmt.Sprintf("# break the cycle: restart one of (%s), or free one of the keys (%s) with `lockgov locks show KEY` then its DEL; then make every code path take these locks in one order (sorted by key)",
			strings.Join(frees, "; "), strings.Join(quoted, ", ")),
	})
}

// overlapping reports whether the waits and holds of a cycle provably
// coexisted: every wait in it (and every hold of a waited-for key) began
// before the oldest heartbeat of the instances in it was sent, so at that
// instant each instance was waiting for a key another one held. A zero
// Since (not published) is taken as old.
func overlapping(comp []int, nodes []dlWaiter, insts map[string]*dlInstance) bool {
	var latest, oldestBeat time.Time
	for _, i := range comp {
		w := nodes[i]
		if w.since.After(latest) {
			latest = w.since
		}
		if w.fallback {
			in := insts[w.inst]
			for _, h := range []fleet.HeldLock{in.local[w.want], in.held[w.want]} {
				if h.Since.After(latest) {
					latest = h.Since
				}
			}
		} else {
			for _, in := range insts {
				if h, ok := in.held[w.want]; ok && h.Since.After(latest) {
					latest = h.Since
				}
			}
		}
		if sent := insts[w.inst].hb.SentAt; !sent.IsZero() && (oldestBeat.IsZero() || sent.Before(oldestBeat)) {
			oldestBeat = sent
		}
	}
	return oldestBeat.IsZero() || !latest.After(oldestBeat)
}

func sortedHolders(r string, insts map[string]*dlInstance) []string {
	var hs []string
	for name, in := range insts {
		if _, ok := in.held[r]; ok {
			hs = append(hs, name)
		}
	}
	sort.Strings(hs)
	return hs
}

// remember records "held before wanted" for every waiter that says what it
// holds. A process-local fallback lock counts as the store's lock it
// stands in for: the order is the code's, which takes the store's locks in
// it again once the store is back.
func (d *Deadlock) remember(nodes []dlWaiter, insts map[string]*dlInstance, now time.Time) {
	for _, w := range nodes {
		in := insts[w.inst]
		wantPat := w.pattern
		for r := range mergedHolds(w) {
			if r == w.want {
				continue
			}
			heldPat := in.held[r].Pattern
			if h, ok := in.local[r]; ok && heldPat == "" {
				heldPat = h.Pattern
			}
			k := orderKey{first: r, then: w.want}
			if heldPat != "" && wantPat != "" && heldPat != wantPat {
				k = orderKey{byPattern: true, first: resource(resourceStore(r), heldPat), then: resource(w.store, wantPat)}
			}
			d.orders[k] = orderSeen{instance: w.inst, store: w.store, a: resourceKey(r), b: w.key, at: now}
		}
	}
	for k, s := range d.orders {
		if now.Sub(s.at) > d.cfg.retention {
			delete(d.orders, k)
		}
	}
	for len(d.orders) > MaxOrders {
		var oldest orderKey
		var t time.Time
		for k, s := range d.orders {
			if t.IsZero() || s.at.Before(t) {
				oldest, t = k, s.at
			}
		}
		delete(d.orders, oldest)
	}
}

// mergedHolds is what w holds, store and process-local locks alike, by
// resource.
func mergedHolds(w dlWaiter) map[string]bool {
	if len(w.localHolds) == 0 {
		return w.holds
	}
	m := maps.Clone(w.holds)
	if m == nil {
		m = map[string]bool{}
	}
	maps.Copy(m, w.localHolds)
	return m
}

func (d *Deadlock) inversions(out *capped, inDeadlock map[string]bool) {
	for k, ab := range d.orders {
		rev := orderKey{byPattern: k.byPattern, first: k.then, then: k.first}
		ba, ok := d.orders[rev]
		if !ok || k.first > k.then {
			continue // report each pair once, from its smaller side
		}
		if k.byPattern {
			if inDeadlock["p\x00"+k.first] && inDeadlock["p\x00"+k.then] {
				continue
			}
		} else if inDeadlock[k.first] && inDeadlock[k.then] {
			continue
		}
		f := Finding{Detector: DetectorDeadlock, Kind: KindLockOrderInversion, Severity: SeverityWarning, Store: ab.store}
		what := "keys"
		if k.byPattern {
			f.KeyPattern = resourceKey(k.first)
			what = "patterns"
		} else {
			f.Key = ab.a
		}
		f.Detail = fmt.Sprintf("%s taken in both orders: %s held %s while waiting for %s (seen %s); %s held %s while waiting for %s (seen %s)",
			what, ab.instance, ab.a, ab.b, ab.at.UTC().Format(time.RFC3339), ba.instance, ba.a, ba.b, ba.at.UTC().Format(time.RFC3339))
		f.Action = fmt.Sprintf("# make every code path take %s and %s in one order (for example sorted by key); until then the two paths can deadlock",
			shellquote.Quote(ab.a), shellquote.Quote(ab.b))
		out.add(f)
	}
}

// sccs returns the strongly connected components of the graph (Tarjan,
// iterative), each sorted, in order of their smallest node.
func sccs(adj [][]int) [][]int {
	n := len(adj)
	index := make([]int, n)
	low := make([]int, n)
	on := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var out [][]int
	next := 0
	type frame struct{ v, e int }
	for s := 0; s < n; s++ {
		if index[s] >= 0 {
			continue
		}
		call := []frame{{s, 0}}
		index[s], low[s] = next, next
		next++
		stack = append(stack, s)
		on[s] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.e < len(adj[f.v]) {
				w := adj[f.v][f.e]
				f.e++
				if index[w] < 0 {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					on[w] = true
					call = append(call, frame{w, 0})
				} else if on[w] {
					low[f.v] = min(low[f.v], index[w])
				}
				continue
			}
			v := f.v
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] == index[v] {
				var comp []int
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					on[w] = false
					comp = append(comp, w)
					if w == v {
						break
					}
				}
				sort.Ints(comp)
				out = append(out, comp)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}
