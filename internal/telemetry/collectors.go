package telemetry

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// CounterVec makes the collector of a counter row.
func (m Metric) CounterVec(constLabels prometheus.Labels) *prometheus.CounterVec {
	m.must(Counter)
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.Name, Help: m.Help, ConstLabels: constLabels}, m.Labels)
}

// GaugeVec makes the collector of a gauge row.
func (m Metric) GaugeVec(constLabels prometheus.Labels) *prometheus.GaugeVec {
	m.must(Gauge)
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: m.Name, Help: m.Help, ConstLabels: constLabels}, m.Labels)
}

// HistogramVec makes the collector of a histogram row.
func (m Metric) HistogramVec(constLabels prometheus.Labels) *prometheus.HistogramVec {
	m.must(Histogram)
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.Name, Help: m.Help, ConstLabels: constLabels, Buckets: m.Buckets}, m.Labels)
}

// GaugeFunc makes a gauge row without labels whose value f computes at scrape time.
func (m Metric) GaugeFunc(constLabels prometheus.Labels, f func() float64) prometheus.GaugeFunc {
	m.must(Gauge)
	if len(m.Labels) > 0 {
		panic(fmt.Sprintf("telemetry: %s has labels; a GaugeFunc cannot", m.Name))
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: m.Name, Help: m.Help, ConstLabels: constLabels}, f)
}

// must panics on a programming error: a row used as the wrong type.
func (m Metric) must(k Kind) {
	if m.Kind != k {
		panic(fmt.Sprintf("telemetry: %s is a %s, not a %s", m.Name, m.Kind, k))
	}
}

// Register registers *c on reg. When an equal collector (same name, type,
// help and labels) is already registered there — another Locker, generator
// or store of this process registered it first — *c becomes that
// collector, so components share one registry. A nil reg registers nothing.
// The first error is kept in *errp and later calls do nothing, so a
// component registers its collectors in a row and checks once.
func Register[C prometheus.Collector](reg prometheus.Registerer, c *C, errp *error) {
	if *errp != nil || reg == nil {
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

// Children caches the labelled children of one component's hot path, keyed
// by whatever identifies a label set (a backend and pattern, a pattern), so
// that the hot path hashes no label values. The label values themselves
// must be bounded (patterns, never raw keys): the cache holds one entry per
// distinct key forever.
type Children[K comparable, V any] struct {
	// New builds the children of k; it runs once per key.
	New func(K) *V

	mu sync.RWMutex
	m  map[K]*V
}

// Get returns the children of k, building them on first use.
func (c *Children[K, V]) Get(k K) *V {
	c.mu.RLock()
	v := c.m[k]
	c.mu.RUnlock()
	if v != nil {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v = c.m[k]; v != nil {
		return v
	}
	if c.m == nil {
		c.m = make(map[K]*V)
	}
	v = c.New(k)
	c.m[k] = v
	return v
}
