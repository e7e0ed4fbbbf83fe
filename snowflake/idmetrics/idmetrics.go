package idmetrics

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/internal/telemetry"

	"github.com/lockgov/lockgov/snowflake"
)

// Worker lease states for lockgov_id_worker_lease{state}.
const (
	WorkerLeaseNone = "none" // the generator is not bound to a lease
	WorkerLeaseHeld = "held"
	WorkerLeaseLost = "lost"
)

var workerLeaseStates = []string{WorkerLeaseNone, WorkerLeaseHeld, WorkerLeaseLost}

// Generator wraps any ID generator, func() (int64, error), with lockgov's ID metrics:
//
//	lockgov_id_generated_total                 IDs returned
//	lockgov_id_clock_backwards_total{action}   backwards steps, action "wait" or "refuse"
//	lockgov_id_clock_backwards_seconds         how far back the clock was
//	lockgov_id_sequence_exhausted_total        waits for the next millisecond
//	lockgov_id_worker_lease{state}             1 for the current state: none, held, lost
//	lockgov_id_lifetime_remaining_seconds      until the layout runs out (WithLifetimeEnd)
//
// Errors from Next are classified with errors.Is/As against snowflake's errors, so a
// generator that returns *snowflake.ClockBackwardsError or wraps ErrWorkerLeaseLost is
// counted too. Events a generator handles without an error (waits) are only visible through
// hooks: pass SnowflakeHooks to snowflake.WithHooks, or call the Observe methods.
type Generator struct {
	next             func() (int64, error)
	hooked           atomic.Bool
	leaseState       atomic.Value // string
	generated        prometheus.Counter
	backwards        *prometheus.CounterVec
	backwardsSeconds prometheus.Observer
	exhausted        prometheus.Counter
	lease            *prometheus.GaugeVec
}

// Option configures a Generator.
type Option interface{ apply(*config) }

type config struct {
	labels prometheus.Labels
	end    time.Time
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithConstLabels adds constant labels (for example service) to every ID metric, so that
// several generators can share one registry.
func WithConstLabels(l prometheus.Labels) Option {
	return optionFunc(func(c *config) { c.labels = l })
}

// WithLifetimeEnd exports lockgov_id_lifetime_remaining_seconds, the time until end
// (snowflake.Generator.End).
func WithLifetimeEnd(end time.Time) Option {
	return optionFunc(func(c *config) { c.end = end })
}

// New registers the ID metrics on reg and returns a governed next. reg is required:
// lockgov never registers on the global registry. Generators with the same constant labels
// on one registry share their series (as governed Lockers do); give each its own labels
// (WithConstLabels, for example the service) to tell them apart.
func New(next func() (int64, error), reg prometheus.Registerer, opts ...Option) (*Generator, error) {
	if next == nil {
		return nil, errors.New("idmetrics.New: nil generator")
	}
	if reg == nil {
		return nil, errors.New("idmetrics.New: nil prometheus.Registerer")
	}
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	generated := telemetry.IDGeneratedTotal.CounterVec(c.labels)
	backwards := telemetry.IDClockBackwardsTotal.CounterVec(c.labels)
	backwardsSeconds := telemetry.IDClockBackwardsSeconds.HistogramVec(c.labels)
	exhausted := telemetry.IDSequenceExhaustedTotal.CounterVec(c.labels)
	lease := telemetry.IDWorkerLease.GaugeVec(c.labels)
	var err error
	telemetry.Register(reg, &generated, &err)
	telemetry.Register(reg, &backwards, &err)
	telemetry.Register(reg, &backwardsSeconds, &err)
	telemetry.Register(reg, &exhausted, &err)
	telemetry.Register(reg, &lease, &err)
	if !c.end.IsZero() {
		end := c.end
		remaining := telemetry.IDLifetimeRemaining.GaugeFunc(c.labels, func() float64 { return time.Until(end).Seconds() })
		telemetry.Register(reg, &remaining, &err)
	}
	if err != nil {
		return nil, fmt.Errorf("idmetrics: register ID metrics: %w", err)
	}
	g := &Generator{
		next:             next,
		generated:        generated.WithLabelValues(),
		backwards:        backwards,
		backwardsSeconds: backwardsSeconds.WithLabelValues(),
		exhausted:        exhausted.WithLabelValues(),
		lease:            lease,
	}
	for _, a := range []string{"wait", "refuse"} {
		g.backwards.WithLabelValues(a) // export zeros, so rate() works from the start
	}
	g.SetWorkerLease(WorkerLeaseNone)
	return g, nil
}

// Next calls the generator and records the outcome.
func (g *Generator) Next() (int64, error) {
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
func (g *Generator) ObserveClockBackwards(offset time.Duration, refused bool) {
	action := "wait"
	if refused {
		action = "refuse"
	}
	g.backwards.WithLabelValues(action).Inc()
	g.backwardsSeconds.Observe(offset.Seconds())
}

// ObserveSequenceExhausted records a wait for the next millisecond.
func (g *Generator) ObserveSequenceExhausted() { g.exhausted.Inc() }

// SetWorkerLease sets the lease state gauge: WorkerLeaseNone, WorkerLeaseHeld or
// WorkerLeaseLost.
func (g *Generator) SetWorkerLease(state string) {
	g.leaseState.Store(state)
	for _, s := range workerLeaseStates {
		v := 0.0
		if s == state {
			v = 1
		}
		g.lease.WithLabelValues(s).Set(v)
	}
}

// SnowflakeHooks returns hooks for snowflake.WithHooks that feed this Generator's metrics.
// Once they are taken, Next no longer counts refusals from errors, which the hooks count.
func (g *Generator) SnowflakeHooks() snowflake.Hooks {
	g.hooked.Store(true)
	return snowflake.Hooks{
		ClockBackwards:    g.ObserveClockBackwards,
		SequenceExhausted: g.ObserveSequenceExhausted,
	}
}
