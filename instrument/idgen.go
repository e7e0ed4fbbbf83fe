package instrument

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/snowflake"
)

// Worker lease states for lockgov_id_worker_lease{state}.
const (
	WorkerLeaseNone = "none" // the generator is not bound to a lease
	WorkerLeaseHeld = "held"
	WorkerLeaseLost = "lost"
)

var workerLeaseStates = []string{WorkerLeaseNone, WorkerLeaseHeld, WorkerLeaseLost}

// IDGen governs any ID generator, func() (int64, error), with lockgov's ID metrics:
//
//	lockgov_id_generated_total                 IDs returned
//	lockgov_id_clock_backwards_total{action}   backwards steps, action "wait" or "refuse"
//	lockgov_id_clock_backwards_seconds         how far back the clock was
//	lockgov_id_sequence_exhausted_total        waits for the next millisecond
//	lockgov_id_worker_lease{state}             1 for the current state: none, held, lost
//	lockgov_id_lifetime_remaining_seconds      until the layout runs out (WithIDLifetimeEnd)
//
// Errors from Next are classified with errors.Is/As against snowflake's errors, so a
// generator that returns *snowflake.ClockBackwardsError or wraps ErrWorkerLeaseLost is
// counted too. Events a generator handles without an error (waits) are only visible through
// hooks: pass SnowflakeHooks to snowflake.WithHooks, or call the Observe methods.
type IDGen struct {
	next             func() (int64, error)
	hooked           atomic.Bool
	leaseState       atomic.Value // string
	generated        prometheus.Counter
	backwards        *prometheus.CounterVec
	backwardsSeconds prometheus.Histogram
	exhausted        prometheus.Counter
	lease            *prometheus.GaugeVec
}

// IDGenOption configures an IDGen.
type IDGenOption interface{ applyIDGen(*idGenConfig) }

type idGenConfig struct {
	labels prometheus.Labels
	end    time.Time
}

type idGenOptionFunc func(*idGenConfig)

func (f idGenOptionFunc) applyIDGen(c *idGenConfig) { f(c) }

// WithIDConstLabels adds constant labels (for example service) to every ID metric, so that
// several generators can share one registry.
func WithIDConstLabels(l prometheus.Labels) IDGenOption {
	return idGenOptionFunc(func(c *idGenConfig) { c.labels = l })
}

// WithIDLifetimeEnd exports lockgov_id_lifetime_remaining_seconds, the time until end
// (snowflake.Generator.End).
func WithIDLifetimeEnd(end time.Time) IDGenOption {
	return idGenOptionFunc(func(c *idGenConfig) { c.end = end })
}

// NewIDGen registers the ID metrics on reg and returns a governed next. reg is required:
// lockgov never registers on the global registry.
func NewIDGen(next func() (int64, error), reg prometheus.Registerer, opts ...IDGenOption) (*IDGen, error) {
	if next == nil {
		return nil, errors.New("instrument: NewIDGen: nil generator")
	}
	if reg == nil {
		return nil, errors.New("instrument: NewIDGen: nil prometheus.Registerer")
	}
	var c idGenConfig
	for _, o := range opts {
		o.applyIDGen(&c)
	}
	g := &IDGen{
		next: next,
		generated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockgov_id_generated_total", Help: "IDs generated.", ConstLabels: c.labels,
		}),
		backwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgov_id_clock_backwards_total", Help: "Backwards clock steps seen by the ID generator, by action (wait, refuse).", ConstLabels: c.labels,
		}, []string{"action"}),
		backwardsSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lockgov_id_clock_backwards_seconds", Help: "How far back the clock was when the ID generator saw it step back.", ConstLabels: c.labels,
			Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.1, 0.5, 1, 10},
		}),
		exhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockgov_id_sequence_exhausted_total", Help: "Milliseconds whose sequence numbers ran out, so a caller waited for the next.", ConstLabels: c.labels,
		}),
		lease: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockgov_id_worker_lease", Help: "1 for the WorkerID lease's current state (none, held, lost), 0 for the others.", ConstLabels: c.labels,
		}, []string{"state"}),
	}
	cs := []prometheus.Collector{g.generated, g.backwards, g.backwardsSeconds, g.exhausted, g.lease}
	if !c.end.IsZero() {
		end := c.end
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockgov_id_lifetime_remaining_seconds", Help: "Seconds until the ID layout runs out of time bits.", ConstLabels: c.labels,
		}, func() float64 { return time.Until(end).Seconds() }))
	}
	for _, a := range []string{"wait", "refuse"} {
		g.backwards.WithLabelValues(a) // export zeros, so rate() works from the start
	}
	for i, col := range cs {
		if err := reg.Register(col); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("instrument: register ID metrics: %w", err)
		}
	}
	g.SetWorkerLease(WorkerLeaseNone)
	return g, nil
}

// Next calls the generator and records the outcome.
func (g *IDGen) Next() (int64, error) {
	id, err := g.next()
	if err == nil {
		g.generated.Inc()
		if g.leaseState.Load() == WorkerLeaseLost {
			g.SetWorkerLease(WorkerLeaseHeld)
		}
		return id, nil
	}
	var cbe *snowflake.ClockBackwardsError
	switch {
	case errors.Is(err, snowflake.ErrWorkerLeaseLost):
		g.SetWorkerLease(WorkerLeaseLost)
	case g.hooked.Load(): // the hook has counted it already
	case errors.As(err, &cbe):
		g.ObserveClockBackwards(cbe.Offset, true)
	case errors.Is(err, snowflake.ErrClockBackwards):
		g.backwards.WithLabelValues("refuse").Inc()
	}
	return id, err
}

// ObserveClockBackwards records a backwards step of offset that was waited out (refused
// false) or refused.
func (g *IDGen) ObserveClockBackwards(offset time.Duration, refused bool) {
	action := "wait"
	if refused {
		action = "refuse"
	}
	g.backwards.WithLabelValues(action).Inc()
	g.backwardsSeconds.Observe(offset.Seconds())
}

// ObserveSequenceExhausted records a wait for the next millisecond.
func (g *IDGen) ObserveSequenceExhausted() { g.exhausted.Inc() }

// SetWorkerLease sets the lease state gauge: WorkerLeaseNone, WorkerLeaseHeld or
// WorkerLeaseLost.
func (g *IDGen) SetWorkerLease(state string) {
	g.leaseState.Store(state)
	for _, s := range workerLeaseStates {
		v := 0.0
		if s == state {
			v = 1
		}
		g.lease.WithLabelValues(s).Set(v)
	}
}

// SnowflakeHooks returns hooks for snowflake.WithHooks that feed this IDGen's metrics.
// Once they are taken, Next no longer counts refusals from errors, which the hooks count.
func (g *IDGen) SnowflakeHooks() snowflake.Hooks {
	g.hooked.Store(true)
	return snowflake.Hooks{
		ClockBackwards:    g.ObserveClockBackwards,
		SequenceExhausted: g.ObserveSequenceExhausted,
	}
}
