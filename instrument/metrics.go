package instrument

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are lockgov's Prometheus collectors. Label values are bounded:
// backend, the key pattern from the policy matcher (never a raw key), a
// result from a fixed set. Tokens never appear.
type metrics struct {
	acquires   *prometheus.CounterVec   // backend, lock_pattern, result
	acquireDur *prometheus.HistogramVec // backend, lock_pattern, result
	holdDur    *prometheus.HistogramVec // backend, lock_pattern
	held       *prometheus.GaugeVec     // backend, lock_pattern
	waiters    *prometheus.GaugeVec     // backend, lock_pattern
	renewals   *prometheus.CounterVec   // backend, lock_pattern, result
	lost       *prometheus.CounterVec   // backend, lock_pattern
	leaked     *prometheus.CounterVec   // backend, lock_pattern
	violations *prometheus.CounterVec   // rule, mode, lock_pattern

	mu       sync.RWMutex
	patterns map[patternKey]*patternMetrics
}

type patternKey struct{ backend, pattern string }

// patternMetrics caches the children of one backend and pattern, so that the
// hot path does no label hashing.
type patternMetrics struct {
	backend, pattern string

	acquired, reentered, notAcquired, failed, refused prometheus.Counter
	durAcquired, durNotAcquired, durFailed            prometheus.Observer
	hold                                              prometheus.Observer
	held, waiters                                     prometheus.Gauge
	renewOK, renewLost, renewError                    prometheus.Counter
	lost, leaked                                      prometheus.Counter
}

// Acquire results, the values of the result label.
const (
	resultAcquired    = "acquired"
	resultReentered   = "reentered"
	resultNotAcquired = "not_acquired"
	resultError       = "error"
	resultRefused     = "refused"
)

var (
	acquireBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	holdBuckets    = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600}
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgov_lock_acquire_total",
			Help: "Lock acquisitions by result (acquired, reentered, not_acquired, error, refused).",
		}, []string{"backend", "lock_pattern", "result"}),
		acquireDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockgov_lock_acquire_duration_seconds",
			Help:    "Time from Acquire to its result, waiting included.",
			Buckets: acquireBuckets,
		}, []string{"backend", "lock_pattern", "result"}),
		holdDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockgov_lock_hold_duration_seconds",
			Help:    "Time a lease was held, until release, loss or leak.",
			Buckets: holdBuckets,
		}, []string{"backend", "lock_pattern"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockgov_lock_held",
			Help: "Leases held by this process.",
		}, []string{"backend", "lock_pattern"}),
		waiters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockgov_lock_waiters",
			Help: "Acquire calls of this process waiting for another holder.",
		}, []string{"backend", "lock_pattern"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgov_lock_renewals_total",
			Help: "Lease renewals by result (ok, lost: ownership proven gone, error: not confirmed).",
		}, []string{"backend", "lock_pattern", "result"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgov_lock_lost_total",
			Help: "Leases that ended without Release (expired, deleted, taken over).",
		}, []string{"backend", "lock_pattern"}),
		leaked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgov_lease_leaked_total",
			Help: "Leases garbage-collected while held; each was logged and released.",
		}, []string{"backend", "lock_pattern"}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgov_policy_violations_total",
			Help: "Calls that broke a governance rule, by rule and by the mode that judged them.",
		}, []string{"rule", "mode", "lock_pattern"}),
		patterns: make(map[patternKey]*patternMetrics),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	register(reg, &m.acquires, &err)
	register(reg, &m.acquireDur, &err)
	register(reg, &m.holdDur, &err)
	register(reg, &m.held, &err)
	register(reg, &m.waiters, &err)
	register(reg, &m.renewals, &err)
	register(reg, &m.lost, &err)
	register(reg, &m.leaked, &err)
	register(reg, &m.violations, &err)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers *c on reg. When another governed Locker already
// registered the same metric on reg, *c becomes that collector, so several
// Lockers share one registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C, errp *error) {
	if *errp != nil {
		return
	}
	err := reg.Register(*c)
	if err == nil {
		return
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return
		}
	}
	*errp = err
}

func (m *metrics) forPattern(backend, pattern string) *patternMetrics {
	k := patternKey{backend, pattern}
	m.mu.RLock()
	pm := m.patterns[k]
	m.mu.RUnlock()
	if pm != nil {
		return pm
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if pm = m.patterns[k]; pm != nil {
		return pm
	}
	pm = &patternMetrics{
		backend: backend, pattern: pattern,
		acquired:       m.acquires.WithLabelValues(backend, pattern, resultAcquired),
		reentered:      m.acquires.WithLabelValues(backend, pattern, resultReentered),
		notAcquired:    m.acquires.WithLabelValues(backend, pattern, resultNotAcquired),
		failed:         m.acquires.WithLabelValues(backend, pattern, resultError),
		refused:        m.acquires.WithLabelValues(backend, pattern, resultRefused),
		durAcquired:    m.acquireDur.WithLabelValues(backend, pattern, resultAcquired),
		durNotAcquired: m.acquireDur.WithLabelValues(backend, pattern, resultNotAcquired),
		durFailed:      m.acquireDur.WithLabelValues(backend, pattern, resultError),
		hold:           m.holdDur.WithLabelValues(backend, pattern),
		held:           m.held.WithLabelValues(backend, pattern),
		waiters:        m.waiters.WithLabelValues(backend, pattern),
		renewOK:        m.renewals.WithLabelValues(backend, pattern, "ok"),
		renewLost:      m.renewals.WithLabelValues(backend, pattern, "lost"),
		renewError:     m.renewals.WithLabelValues(backend, pattern, "error"),
		lost:           m.lost.WithLabelValues(backend, pattern),
		leaked:         m.leaked.WithLabelValues(backend, pattern),
	}
	m.patterns[k] = pm
	return pm
}

// observe records d on o with the trace id as exemplar when there is one.
func observe(o prometheus.Observer, d time.Duration, traceID string) {
	if traceID != "" {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
			return
		}
	}
	o.Observe(d.Seconds())
}
