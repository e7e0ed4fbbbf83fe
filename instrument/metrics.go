package instrument

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/internal/telemetry"
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

	patterns telemetry.Children[patternKey, patternMetrics]
}

type patternKey struct{ backend, pattern string }

// patternMetrics caches the children of one backend and pattern, so that the
// hot path does no label hashing.
type patternMetrics struct {
	backend, pattern string

	acquired, reentered, notAcquired, failed, refused prometheus.Counter
	durAcquired, durNotAcquired, durFailed            *telemetry.Timed
	hold                                              *telemetry.Timed
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

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		acquires:   telemetry.LockAcquireTotal.CounterVec(nil),
		acquireDur: telemetry.LockAcquireDuration.HistogramVec(nil),
		holdDur:    telemetry.LockHoldDuration.HistogramVec(nil),
		held:       telemetry.LockHeld.GaugeVec(nil),
		waiters:    telemetry.LockWaiters.GaugeVec(nil),
		renewals:   telemetry.LockRenewalsTotal.CounterVec(nil),
		lost:       telemetry.LockLostTotal.CounterVec(nil),
		leaked:     telemetry.LeaseLeakedTotal.CounterVec(nil),
		violations: telemetry.PolicyViolationsTotal.CounterVec(nil),
	}
	var err error
	telemetry.Register(reg, &m.acquires, &err)
	telemetry.Register(reg, &m.acquireDur, &err)
	telemetry.Register(reg, &m.holdDur, &err)
	telemetry.Register(reg, &m.held, &err)
	telemetry.Register(reg, &m.waiters, &err)
	telemetry.Register(reg, &m.renewals, &err)
	telemetry.Register(reg, &m.lost, &err)
	telemetry.Register(reg, &m.leaked, &err)
	telemetry.Register(reg, &m.violations, &err)
	if err != nil {
		return nil, err
	}
	m.patterns.New = m.newPattern
	return m, nil
}

func (m *metrics) forPattern(backend, pattern string) *patternMetrics {
	return m.patterns.Get(patternKey{backend, pattern})
}

func (m *metrics) newPattern(k patternKey) *patternMetrics {
	backend, pattern := k.backend, k.pattern
	return &patternMetrics{
		backend: backend, pattern: pattern,
		acquired:       m.acquires.WithLabelValues(backend, pattern, resultAcquired),
		reentered:      m.acquires.WithLabelValues(backend, pattern, resultReentered),
		notAcquired:    m.acquires.WithLabelValues(backend, pattern, resultNotAcquired),
		failed:         m.acquires.WithLabelValues(backend, pattern, resultError),
		refused:        m.acquires.WithLabelValues(backend, pattern, resultRefused),
		durAcquired:    telemetry.NewTimed(m.acquireDur.WithLabelValues(backend, pattern, resultAcquired), acquireBuckets),
		durNotAcquired: telemetry.NewTimed(m.acquireDur.WithLabelValues(backend, pattern, resultNotAcquired), acquireBuckets),
		durFailed:      telemetry.NewTimed(m.acquireDur.WithLabelValues(backend, pattern, resultError), acquireBuckets),
		hold:           telemetry.NewTimed(m.holdDur.WithLabelValues(backend, pattern), holdBuckets),
		held:           m.held.WithLabelValues(backend, pattern),
		waiters:        m.waiters.WithLabelValues(backend, pattern),
		renewOK:        m.renewals.WithLabelValues(backend, pattern, "ok"),
		renewLost:      m.renewals.WithLabelValues(backend, pattern, "lost"),
		renewError:     m.renewals.WithLabelValues(backend, pattern, "error"),
		lost:           m.lost.WithLabelValues(backend, pattern),
		leaked:         m.leaked.WithLabelValues(backend, pattern),
	}
}

var (
	acquireBuckets = telemetry.LockAcquireDuration.Buckets
	holdBuckets    = telemetry.LockHoldDuration.Buckets
)
