package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

const (
	beginMarker = "<!-- bench:begin -->"
	endMarker   = "<!-- bench:end -->"
)

// target is one line of the "Must show", checked against this run.
type target struct {
	what     string
	got      float64
	want     float64
	atMost   bool // the target is an upper bound
	unit     string
	format   string
	measured bool   // false: the run did not measure it
	context  string // the same figure for a peer in the same run, to read the target against
	// capped: both sides ran at a limit neither can pass (a Snowflake layout's IDs per
	// second), so the ratio is 1 within measurement whatever its last digit says.
	capped bool
	// bound: the same figure, in the same run, for a reference that does the least work the
	// target's subject must do (the contention table's no-lock floor; the raw pair wrapped in
	// the same two SDK spans), named by boundName ("" when there is none). A target the bound
	// misses too is out of reach of anything doing that work on this machine, for the reason
	// boundWhy gives. It is a reference, not a proof: a design doing less, or batching more,
	// could pass it.
	bound               float64
	boundName, boundWhy string
	// machine: the figure the least the target's mechanism needs reaches in the same run, with
	// nothing of a lock in it (for the busy targets: handoffs costing exactly one PUBLISH
	// between idle processes; for the peer targets: the raw pair itself, one command at a
	// time, no spans), named by machineName ("" when not measured). A target it misses is
	// beyond the machine for that mechanism, whatever the lock does.
	machine     float64
	machineName string
}

// atLimit is how close to a layout's limit a generator must run for a ratio between two
// such generators to count as equal: the limit is a hard cap and the rest is timer noise.
const atLimit = 0.995

func (t target) pass() bool {
	if t.capped {
		return true
	}
	if t.atMost {
		return t.got <= t.want
	}
	return t.got >= t.want
}

func (t target) result() string {
	if !t.measured {
		return "not measured in this run"
	}
	if t.pass() {
		return "**PASS**"
	}
	var miss string
	if t.atMost {
		miss = fmt.Sprintf("**MISS** by %s (%s over)", percent((t.got/t.want-1)*100), t.diff(t.got-t.want))
	} else {
		miss = fmt.Sprintf("**MISS** by %s (%s short)", percent((1-t.got/t.want)*100), t.diff(t.want-t.got))
	}
	if t.boundName != "" {
		b := t
		b.got = t.bound
		if !b.pass() {
			miss += fmt.Sprintf("; %s misses it too (%s): %s", t.boundName, t.fmt(t.bound), t.boundWhy)
			// The bound missing does not excuse a subject that falls short of the bound as
			// well: that distance is the subject's own work, and the result says so.
			short := t.bound - t.got
			if t.atMost {
				short = -short
			}
			if t.diff(short) != t.diff(0) && short > 0 {
				miss += fmt.Sprintf("; lockgov is %s short of it in the same run, and that part is lockgov's own", t.diff(short))
			}
		}
	}
	if t.machineName != "" {
		m := t
		m.got = t.machine
		if !m.pass() {
			miss += fmt.Sprintf("; so does %s (%s)", t.machineName, t.fmt(t.machine))
		}
	}
	return miss
}

// percent shows small misses with a decimal, so that none reads "by 0%".
func percent(p float64) string {
	if p < 10 {
		return fmt.Sprintf("%.1f%%", p)
	}
	return fmt.Sprintf("%.0f%%", p)
}

// fmt shows a figure of the target's kind. A figure that would print as the target itself
// without being it gets one more decimal: a floor at 84.9% that misses 85% must not read
// "misses it too (85%)".
func (t target) fmt(v float64) string {
	s := fmt.Sprintf(t.format, v)
	if v != t.want && s == fmt.Sprintf(t.format, t.want) {
		var prec int
		if _, err := fmt.Sscanf(t.format, "%%.%df", &prec); err == nil {
			s = fmt.Sprintf("%.*f", prec+1, v)
		}
	}
	return s + t.unit
}

// diff shows a distance between two of the target's figures. For a figure in percent the
// distance is in percentage points, with a decimal (a busy share of 79.9% against 80% is
// 0.1 points short, which "0% short" hid, and "7% short" read as a relative miss).
func (t target) diff(v float64) string {
	if t.unit == "%" {
		return fmt.Sprintf("%.1f points", v)
	}
	return t.fmt(v)
}

func (r *results) lockRowFor(name string, g int) *lockRow {
	for i := range r.uncontended {
		if r.uncontended[i].name == name && r.uncontended[i].goroutines == g {
			return &r.uncontended[i]
		}
	}
	return nil
}

func (r *results) contRowFor(name string) *contRow {
	for i := range r.contended {
		if r.contended[i].name == name {
			return &r.contended[i]
		}
	}
	return nil
}

func (r *results) idRowFor(name, layout string, g int) *idRow {
	for i := range r.ids {
		if x := r.ids[i]; x.name == name && x.layout == layout && x.goroutines == g {
			return &r.ids[i]
		}
	}
	return nil
}

// pairRatio is the median over rounds of f(a's round k) / f(b's round k): a ratio computed
// pair by pair within each round, never across rounds.
func pairRatio[R any](a, b []R, f func(R) float64) (float64, bool) {
	if len(a) == 0 || len(a) != len(b) {
		return 0, false
	}
	var xs []float64
	for k := range a {
		if d := f(b[k]); d > 0 {
			xs = append(xs, f(a[k])/d)
		}
	}
	return median(xs), len(xs) > 0
}

func (r *results) targets() []target {
	var ts []target
	tput := func(x lockRound) float64 { return x.opsPerS }
	cpu := func(x lockRound) float64 { return float64(x.cpu) }
	gov := r.lockRowFor(nameGoverned, 16)
	add := func(what string, a, b *lockRow, f func(lockRound) float64, want float64, atMost bool) {
		t := target{what: what, want: want, atMost: atMost, unit: "x", format: "%.2f"}
		if a != nil && b != nil {
			t.got, t.measured = pairRatio(a.rounds, b.rounds, f)
			t.context = fmt.Sprintf("%s %s/s, %s %s/s (client %.1f / %.1f, redis-server %.1f / %.1f µs CPU per pair)", label(a.name), thousands(a.opsPerSec), label(b.name), thousands(b.opsPerSec), a.cpu, b.cpu, a.server, b.server)
			// The bound: the least Redis work a safe lock does (the raw pair) inside the two
			// spans the target asks for, against the same peer in the same rounds. Govern
			// beats it only by doing less per pair than the raw pair, or by batching.
			if sp := r.lockRowFor(nameRawSpans, 16); sp != nil {
				if v, ok := pairRatio(sp.rounds, b.rounds, f); ok {
					t.bound, t.boundName = v, "the raw pair in the same two SDK spans"
					t.boundWhy = "with the two spans the target asks for, a lock doing the raw pair's Redis work misses it"
					t.context += fmt.Sprintf("; the raw pair in the same two spans: %s", t.fmt(v))
				}
			}
			// Against a peer, the raw pair itself (no spans, the least Redis work, unbatched):
			// a target it misses too asks more than any lock doing that work one command at a
			// time reaches against this peer here.
			if raw := r.lockRowFor(nameRaw, 16); raw != nil && b.name != nameRaw {
				if v, ok := pairRatio(raw.rounds, b.rounds, f); ok {
					t.context += fmt.Sprintf("; the raw pair itself, no spans: %s", t.fmt(v))
					t.machine, t.machineName = v, "the raw pair itself, with no spans and no lock decisions"
				}
			}
			// The target with the spans taken out, and what the spans cost Govern and the raw
			// pair in the same rounds: a miss Govern without a tracer does not share is the
			// spans', and a span cost Govern shares with the raw pair is the SDK's.
			if nt := r.lockRowFor(nameGovNoTr, 16); nt != nil {
				if v, ok := pairRatio(nt.rounds, b.rounds, f); ok {
					t.context += fmt.Sprintf("; Govern without a tracer: %s", t.fmt(v))
				}
				raw, sp := r.lockRowFor(nameRaw, 16), r.lockRowFor(nameRawSpans, 16)
				gv, gok := pairRatio(a.rounds, nt.rounds, f)
				if raw != nil && sp != nil && gok {
					if rv, ok := pairRatio(sp.rounds, raw.rounds, f); ok {
						what := "throughput"
						if t.atMost {
							what = "CPU per pair"
						}
						t.context += fmt.Sprintf("; with the spans Govern's %s is %.2fx its own without them, the raw pair's %.2fx", what, gv, rv)
					}
				}
			}
		}
		ts = append(ts, t)
	}
	add("uncontended, 16 goroutines: Govern throughput / bsm/redislock >= 1.0x", gov, r.lockRowFor(nameBSM, 16), tput, 1.0, false)
	add("uncontended, 16 goroutines: Govern throughput / redsync >= 1.3x", gov, r.lockRowFor(nameRedsync, 16), tput, 1.3, false)
	add("uncontended, 16 goroutines: Govern throughput / raw floor >= 0.85x", gov, r.lockRowFor(nameRaw, 16), tput, 0.85, false)
	add("uncontended, 16 goroutines: client CPU per Govern pair / raw pair <= 1.3x", gov, r.lockRowFor(nameRaw, 16), cpu, 1.3, true)

	wait, fair := r.contRowFor(nameWait), r.contRowFor(nameFair)
	pct := func(what string, row *contRow, f func(*contRow) float64, want float64, atMost bool, unit, format string) {
		t := target{what: what, want: want, atMost: atMost, unit: unit, format: format}
		if row != nil {
			t.got, t.measured = f(row), true
			var peers []string
			for _, p := range []string{nameBSMLinear, nameRedsyncC} {
				if x := r.contRowFor(p); x != nil {
					peers = append(peers, fmt.Sprintf("%s %s", label(p), t.fmt(f(x))))
				}
			}
			t.context = strings.Join(peers, ", ")
		}
		ts = append(ts, t)
	}
	busy := func(c *contRow) float64 { return 100 * c.busy }
	// The busy targets are read against the floor: the token ring of the same rounds,
	// which hands over with no lock at all.
	withFloor := func(row *contRow) {
		t, floor := &ts[len(ts)-1], r.contRowFor(nameFloorC)
		if floor == nil || row == nil {
			return
		}
		t.bound, t.boundName, t.boundWhy = 100*floor.busy, "the no-lock floor", "above what a handoff by notification reaches among eight contenders on this machine"
		vs, _ := pairRatio(row.rounds, floor.rounds, func(x contRound) float64 { return float64(x.held) / float64(x.wall) })
		t.context = fmt.Sprintf("floor (token ring, no lock) %s, idle %.2f ms per handoff against lockgov's %.2f; lockgov / floor %.2fx in the same rounds; %s",
			t.fmt(t.bound), floor.idle(), row.idle(), vs, t.context)
		if rt := r.roundTrips; rt != nil && len(rt.notify) > 0 {
			t.context += fmt.Sprintf("; a PUBLISH to a subscriber, both idle %v before it (a handoff with no lock in it): %.2f ms mean, a handoff of exactly that: busy %.0f%% at this row's mean hold",
				hold, rt.meanNotify()/1000, 100*rt.busyAt(row.meanHold))
			t.machine, t.machineName = 100*rt.busyAt(row.meanHold), "a handoff of exactly one PUBLISH between idle processes, no lock and no other contender"
		}
		if st := r.scripts; row == wait && st.measured() {
			t.context += fmt.Sprintf("; redis-server's time per handoff script under the same contention (SLOWLOG, p50): lockgov's release %.0f µs, the floor's %.0f µs",
				us(quantile(st.release, 0.5)), us(quantile(st.floor, 0.5)))
		}
	}
	pct("contended: lockgov default wait busy >= 85%", wait, busy, 85, false, "%", "%.0f")
	withFloor(wait)
	pct("contended: lockgov default wait p99 wait <= 25 ms", wait, func(c *contRow) float64 { return c.p99 }, 25, true, " ms", "%.1f")
	pct("contended: Fair mode busy >= 80%", fair, busy, 80, false, "%", "%.0f")
	withFloor(fair)
	pct("contended: Fair mode min/max acquisitions per contender >= 0.9", fair, func(c *contRow) float64 { return c.share }, 0.9, false, "", "%.2f")
	et := target{what: "contended: etcdlock acquisitions/s / concurrency.Mutex >= 5x", want: 5, unit: "x", format: "%.2f"}
	if a, b := r.contRowFor(nameEtcdlockC), r.contRowFor(nameEtcdMuC); a != nil && b != nil {
		et.got, et.measured = pairRatio(a.rounds, b.rounds, func(x contRound) float64 { return x.acqPerSec() })
		et.context = fmt.Sprintf("%.0f vs %.0f acquisitions/s", a.acqPerSec, b.acqPerSec)
	}
	ts = append(ts, et)

	single := target{what: "snowflake 41/10/12, 1 goroutine >= 97% of the 4.096M IDs/s limit", want: 97, unit: "%", format: "%.1f"}
	alloc := target{what: "snowflake NextID allocation-free (allocs/ID, every layout and parallelism)", want: 0, atMost: true, format: "%.3f"}
	if x := r.idRowFor(idLockgov, "41x10x12", 1); x != nil {
		single.got, single.measured = 100*x.idsPerSec/x.limit, true
		var peers []string
		for _, p := range []string{idBwmarrin, idSonyflake} {
			if y := r.idRowFor(p, "41x10x12", 1); y != nil {
				peers = append(peers, fmt.Sprintf("%s %.1f%%", p, 100*y.idsPerSec/y.limit))
			}
		}
		single.context = strings.Join(peers, ", ")
		alloc.measured = true
		for _, y := range r.ids {
			if y.name == idLockgov {
				alloc.got = max(alloc.got, y.allocs)
			}
		}
		// The process allocates a little in the background (runtime, the timer that ends a
		// case): below one allocation per 1000 IDs is none on the hot path.
		if alloc.got < 0.001 {
			alloc.got = 0
		}
	}
	ts = append(ts, single, alloc)
	for _, l := range layouts {
		par := runtime.GOMAXPROCS(0)
		for _, y := range r.ids {
			if y.layout == l.name && y.goroutines > 1 {
				par = y.goroutines
			}
		}
		t := target{what: fmt.Sprintf("snowflake %s parallel (%d goroutines): lockgov / bwmarrin >= 1.0x", strings.ReplaceAll(l.name, "x", "/"), par),
			want: 1, unit: "x", format: "%.2f"}
		if x := r.idRowFor(idLockgov, l.name, par); x != nil && par > 0 {
			t.got, t.measured = x.ratioBw, true
			if y := r.idRowFor(idBwmarrin, l.name, par); y != nil {
				t.context = fmt.Sprintf("%.1f vs %.1f ns/ID", x.nsPerID, y.nsPerID)
				if x.limit > 0 && x.idsPerSec >= atLimit*x.limit && y.idsPerSec >= atLimit*y.limit {
					t.capped = true
					t.context += fmt.Sprintf("; both at the layout's limit (%.1f%% and %.1f%%): equal", 100*x.idsPerSec/x.limit, 100*y.idsPerSec/y.limit)
				}
			}
		}
		ts = append(ts, t)
	}
	return ts
}

// renderSection is the markdown between the bench markers.
func renderSection(r *results) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("%s\n", beginMarker)
	w("## Side by side with the peers (generated by bench/)\n\n")
	w("Everything between the `bench:begin` and `bench:end` markers is rewritten by the runner; edit `bench/` instead.\n")
	w("Reproduce with `scripts/bench` (or `cd bench && go run .`).")
	if r.quick {
		w(" **This is a -quick smoke run: the figures are not meaningful.**")
	}
	w("\n\n")
	m := r.machine
	w("Run %s UTC, %v in all. Machine: %s, nproc %d (GOMAXPROCS %d), load average %s at the start and %s at the end; %s; redis-server %s (its own process, loopback, started by the runner); etcd embedded (go.etcd.io/etcd/server/v3/embed) in a child process of the runner.",
		r.start.Format("2006-01-02 15:04"), r.elapsed, m.cpu, m.nproc, m.gomaxprocs, m.loadStart, m.loadEnd, m.goVersion, orUnknown(m.redis))
	if r.cfg.note != "" {
		w(" %s", r.cfg.note)
	}
	w("\n\n")
	if len(r.versions) > 0 {
		var vs []string
		for _, v := range r.versions {
			vs = append(vs, fmt.Sprintf("%s %s", v.path, v.version))
		}
		w("Versions: lockgov from this tree; %s.\n\n", strings.Join(vs, ", "))
	}
	w("Ratios are computed pair by pair inside each round (every round runs every case once, in an order shuffled each round with a fixed seed, so that no case always follows the same one) and the tables show medians over the rounds: %d rounds for locks and IDs, %d under contention.\n\n",
		r.cfg.rounds, contRounds(r))

	w("### Targets (issue 12)\n\n")
	w("Each target is also read against what no lock on this machine does better than, measured in the same rounds: the busy targets against the contention table's floor (a token passed by pub/sub, no lock), the uncontended Govern targets against the raw pair wrapped in the same two SDK spans (the least Redis work a safe lock does, with the spans the target asks for). A miss that this bound shares says so. The bounds are references measured in the same rounds, not proofs: a design that does less work, or batches more, could pass them.\n\n")
	w("| target | measured | result | the same figure in this run |\n|---|---|---|---|\n")
	for _, t := range r.targets() {
		got := "-"
		if t.measured {
			got = t.fmt(t.got)
		}
		w("| %s | %s | %s | %s |\n", t.what, got, t.result(), t.context)
	}
	w("\n")

	if len(r.uncontended) > 0 {
		w("### Locks: uncontended acquire + release\n\n")
		w("Each goroutine takes and releases its own key in a loop for %v per round; the goroutines share one client (one service instance). \"vs raw\" is throughput relative to the raw go-redis pair in the same round. Allocations and CPU are the whole runner process's (getrusage RUSAGE_SELF) per pair, the client's work alone: both servers run in processes of their own (the embedded etcd in a child of the runner). lockgov + Govern has spans on (an SDK tracer provider, always sampled, a batch processor) and metrics on a registry, and its heartbeat running; the \"no tracer\" row is the same with the global (no-op) tracer provider, so the difference between the two is what recording spans cost. \"raw pair + two OTel SDK spans\" wraps the raw pair in the same two spans on the same kind of provider, with as many attributes, without lockgov: its distance from raw is what the SDK costs anyone who records those spans. The last column is the server's own CPU per pair (redis-server's from INFO cpu, the etcd child's from /proc/<pid>/stat): on two cores the client and the server share, throughput follows the sum of the two CPU columns.\n\n", r.cfg.lockDur)
		w("| library | goroutines | pairs/s | vs raw | p50 µs | p99 µs | allocs/pair | CPU µs/pair | CPU vs raw | server CPU µs/pair |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.uncontended {
			srv := fmt.Sprintf("%.1f", x.server)
			w("| %s | %d | %s | %.2f | %.0f | %.0f | %.0f | %.1f | %.2f | %s |\n", x.name, x.goroutines, thousands(x.opsPerSec), x.ratio, x.p50, x.p99, x.allocs, x.cpu, x.cpuRatio, srv)
		}
		w("\n")
	}
	if len(r.contended) > 0 {
		w("### Locks: contention on one key\n\n")
		w("%d contenders, each with its own client, loop acquire, hold %v (`time.Sleep`), release, for %v per round; waits in flight at the end finish and count. Busy = sum of measured holds / wall time; \"mean hold\" shows how much longer than 1 ms a `time.Sleep(1ms)` took on this machine (scheduling delay from the load); \"idle per handoff\" = (wall time - holds) / acquisitions, the time the lock sits free between one release and the next acquisition (a handoff by notification is at least a message to redis-server and one from it to the waiter's process; see the messages below the table). Wait = from calling acquire to holding the lock (a strategy that gives up, like redsync after 32 tries, is called again and the wait keeps counting). The floor row is no lock: the contenders pass a token in a ring, each release a script with a release's writes that publishes to the next contender's channel, each acquire one command to register and then the message; its idle per handoff is what a handoff by notification costs on this machine with nothing decided by a lock, and the busy targets are read against it.\n\n",
			contenders, hold, r.cfg.contDur)
		w("| library | wait strategy | acq/s | busy | p50 wait ms | p99 wait ms | max wait ms | acquisitions per contender (min / max) | min/max | give-ups per acq | new redis connections per acq | mean hold ms | idle per handoff ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.contended {
			dials := fmt.Sprintf("%.2f", x.dials)
			if strings.Contains(x.name, "etcd") {
				dials = "-"
			}
			w("| %s | %s | %.0f | %.0f%% | %.2f | %.1f | %.1f | %.0f / %.0f | %.2f | %.2f | %s | %.2f | %.2f |\n", x.name, x.strategy, x.acqPerSec, 100*x.busy, x.p50, x.p99, x.maxW, x.minAcq, x.maxAcq, x.share, x.retries, dials, x.meanHold, x.idle())
		}
		w("\n")
		if rt := r.roundTrips; rt != nil && len(rt.notify) > 0 {
			w("Messages on this machine, measured in the same rounds (%d of each kind per round, %d rounds, on clients of their own): a PING back to back, p50 %.0f µs, mean %.0f µs; a PING sent right after sleeping %v, as a release is sent after a hold, p50 %.0f µs, mean %.0f µs; a PUBLISH sent right after sleeping %v to a subscriber waiting since the last one, until the subscriber's goroutine has it, p50 %.0f µs, p90 %.0f µs, mean %.0f µs. The last is a handoff by notification with no lock in it (one command in, one message out, both processes idle as a holder's and a waiter's are): one that cost exactly its mean would keep a lock held %s (lockgov default wait's mean hold) busy %.0f%%.\n\n",
				pingsPerRound, rt.rounds, us(quantile(rt.hot, 0.5)), us(mean(rt.hot)), hold, us(quantile(rt.idle, 0.5)), us(mean(rt.idle)),
				hold, us(quantile(rt.notify, 0.5)), us(quantile(rt.notify, 0.9)), rt.meanNotify(), holdOf(r.contRowFor(nameWait)), 100*rt.busyAt(meanHoldOf(r.contRowFor(nameWait))))
		}
		if st := r.scripts; st.measured() {
			w("redis-server's own time per handoff script, under the same contention: one more pass of the floor and of lockgov's default wait after the rounds (%v each, not in the table), with every command of %d µs or more in SLOWLOG (%d of the floor's %d scripts and %d of lockgov's %d releases were logged; the commands inside a script take 1-3 µs and mostly are not). The floor's script: p50 %.0f µs, p90 %.0f µs. lockgov's release.lua, which checks the owner, leaves the tombstone, pops the queue, checks the waiter's deadline, takes a fence and writes the waiter's lock value before it publishes: p50 %.0f µs, p90 %.0f µs. A waiter hears of a handoff only when the script has ended, so the difference, %.0f µs at p50, is on every handoff's path.\n\n",
				r.cfg.contDur, slowlogMinUs, len(st.floor), st.floorAcq, len(st.release), st.waitAcq,
				us(quantile(st.floor, 0.5)), us(quantile(st.floor, 0.9)), us(quantile(st.release, 0.5)), us(quantile(st.release, 0.9)),
				us(quantile(st.release, 0.5))-us(quantile(st.floor, 0.5)))
		}
	}
	if len(r.ids) > 0 {
		w("### IDs\n\n")
		w("All generators set to the same layout, worker 1 and a 1 ms time unit; parallel = GOMAXPROCS goroutines on one generator (Fill: each goroutine fills its own buffer of 4096 from the shared generator). %v per case per round. %% of limit = IDs/s over the layout's 2^sequence x 1000 per second.\n\n", r.cfg.idDur)
		w("| generator | layout | goroutines | M IDs/s | ns/ID | allocs/ID | vs bwmarrin | %% of limit |\n|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.ids {
			w("| %s | %s | %d | %.2f | %.1f | %.3f | %.2f | %.1f%% |\n", x.name, x.layout, x.goroutines, x.idsPerSec/1e6, x.nsPerID, x.allocs, x.ratioBw, 100*x.idsPerSec/x.limit)
		}
		w("\n")
	}
	if len(r.sub) > 0 || len(r.notes) > 0 {
		w("### Quota, idempotency, agent scan (Go benchmarks, run as subprocesses)\n\n")
		for _, n := range r.notes {
			w("- %s\n", n)
		}
		if len(r.sub) > 0 {
			w("`go test -run '^$' -bench <regexp> -benchmem -benchtime <t> -count 1 <package>` in the package's module, in this run; skipped rows say why.\n\n")
			w("| package | benchmark | figures |\n|---|---|---|\n")
			for _, s := range r.sub {
				if s.skipped != "" {
					w("| %s | - | skipped: %s |\n", s.spec.label, strings.ReplaceAll(s.skipped, "|", "/"))
					continue
				}
				for _, l := range s.lines {
					var ms []string
					for _, x := range l.metrics {
						ms = append(ms, fmt.Sprintf("%s %s", trimFloat(x.value), x.unit))
					}
					w("| %s | %s | %s |\n", s.spec.label, l.name, strings.Join(ms, ", "))
				}
			}
		}
		w("\n")
	}
	if r.cfg.charts != "" {
		w("### Charts\n\n")
		for _, c := range chartFiles {
			w("![%s](%s/%s)\n\n", c.title, r.cfg.chartRef, c.file)
		}
	}
	w("%s", endMarker)
	return b.String()
}

func contRounds(r *results) int {
	if len(r.contended) > 0 {
		return len(r.contended[0].rounds)
	}
	return 0
}

func orUnknown(s string) string {
	if s == "" {
		return "(not started)"
	}
	return s
}

func trimFloat(v float64) string {
	if v == float64(int64(v)) {
		return thousands(v)
	}
	return fmt.Sprintf("%.4g", v)
}

// thousands formats v rounded, with commas.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// replaceSection writes section over the bench markers of the markdown file at path, or,
// when the file has none yet, inserts it before the first second-level heading. The rest of
// the file is left as it is.
func replaceSection(path, section string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(b)
	i, j := strings.Index(doc, beginMarker), strings.Index(doc, endMarker)
	switch {
	case i >= 0 && j > i:
		doc = doc[:i] + section + doc[j+len(endMarker):]
	case i >= 0 || j >= 0:
		return fmt.Errorf("%s: only one of %s and %s, or in the wrong order: fix the file by hand", path, beginMarker, endMarker)
	default:
		k := strings.Index(doc, "\n## ")
		if k < 0 {
			doc = strings.TrimRight(doc, "\n") + "\n\n" + section + "\n"
		} else {
			doc = doc[:k+1] + section + "\n\n" + doc[k+1:]
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bench-*.md")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(doc); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if fi, err := os.Stat(path); err == nil {
		_ = os.Chmod(tmp.Name(), fi.Mode().Perm())
	}
	return os.Rename(tmp.Name(), path)
}

// meanHoldOf is row's mean hold in ms (the hold when row is nil).
func meanHoldOf(row *contRow) float64 {
	if row == nil || row.meanHold == 0 {
		return ms(hold)
	}
	return row.meanHold
}

// holdOf formats meanHoldOf(row).
func holdOf(row *contRow) string { return fmt.Sprintf("%.2f ms", meanHoldOf(row)) }
