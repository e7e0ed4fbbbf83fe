package telemetry

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ExemplarInterval is how often one bucket of a Timed histogram takes a new
// exemplar at most.
//
// client_golang keeps one exemplar per bucket, the latest, and Prometheus
// reads it once per scrape (every 15 to 60 seconds as usually configured),
// so an exemplar per observation is work no scrape sees: each costs a label
// map, an exemplar message and a clock read (measured: ~1.5 µs and 5
// allocations per governed acquire + release with spans on, see
// docs/BENCHMARKS.md). One per bucket per second keeps every bucket's
// exemplar at most a second old, and a slow observation, which lands in a
// bucket of its own, still gets its trace id there.
const ExemplarInterval = time.Second

// Timed is one histogram child that records durations, with trace ids as
// exemplars at most once per bucket per ExemplarInterval.
type Timed struct {
	o      prometheus.Observer
	eo     prometheus.ExemplarObserver // nil: o takes no exemplars
	bounds []float64
	next   []atomic.Int64 // per bucket, +Inf last: the clock (now) before which it takes none
	now    func() int64   // monotonic nanoseconds; tests replace it
}

// epoch anchors monotonicNow: time.Since reads the monotonic clock only.
var epoch = time.Now()

func monotonicNow() int64 { return int64(time.Since(epoch)) }

// NewTimed wraps o, a child of a histogram with the given bucket upper
// bounds (the row's Buckets).
func NewTimed(o prometheus.Observer, bounds []float64) *Timed {
	t := &Timed{o: o, bounds: bounds, next: make([]atomic.Int64, len(bounds)+1), now: monotonicNow}
	t.eo, _ = o.(prometheus.ExemplarObserver)
	return t
}

// Observe records d, with traceID (when not empty) as the exemplar if d's
// bucket has taken none in the last ExemplarInterval.
func (t *Timed) Observe(d time.Duration, traceID string) {
	v := d.Seconds()
	if traceID != "" && t.eo != nil {
		// Buckets are upper-inclusive: v belongs to the first bound >= v.
		n := &t.next[sort.SearchFloat64s(t.bounds, v)]
		now := t.now()
		if next := n.Load(); now >= next && n.CompareAndSwap(next, now+int64(ExemplarInterval)) {
			t.eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": traceID})
			return
		}
	}
	t.o.Observe(v)
}
