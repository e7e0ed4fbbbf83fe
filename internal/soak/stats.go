package soak

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Latency is a histogram of durations in buckets 5% wide from 1µs, with a
// fixed size whatever the number of operations (so recording does not grow
// the heap the run measures).
type Latency struct {
	b      [latBuckets]atomic.Uint64
	n, err atomic.Uint64
	max    atomic.Int64
}

const (
	latBuckets = 512
	latGrowth  = 1.05
)

// Observe records one operation.
func (l *Latency) Observe(d time.Duration, err error) {
	l.n.Add(1)
	if err != nil {
		l.err.Add(1)
	}
	i := 0
	if d > time.Microsecond {
		i = min(int(math.Log(float64(d)/float64(time.Microsecond))/math.Log(latGrowth)), latBuckets-1)
	}
	l.b[i].Add(1)
	for {
		m := l.max.Load()
		if int64(d) <= m || l.max.CompareAndSwap(m, int64(d)) {
			break
		}
	}
}

// Quantile returns the upper bound of the bucket holding quantile q.
func (l *Latency) Quantile(q float64) time.Duration {
	n := l.n.Load()
	if n == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i := range l.b {
		seen += l.b[i].Load()
		if seen >= want {
			return time.Duration(float64(time.Microsecond) * math.Pow(latGrowth, float64(i+1)))
		}
	}
	return time.Duration(l.max.Load())
}

// KindStats summarises one kind of traffic.
type KindStats struct {
	Ops, Errors uint64
	P50, P99    time.Duration
	Max         time.Duration
}

// ErrorRate is Errors/Ops.
func (k KindStats) ErrorRate() float64 {
	if k.Ops == 0 {
		return 0
	}
	return float64(k.Errors) / float64(k.Ops)
}

func (l *Latency) stats() KindStats {
	return KindStats{Ops: l.n.Load(), Errors: l.err.Load(), P50: l.Quantile(0.5), P99: l.Quantile(0.99),
		Max: time.Duration(l.max.Load())}
}

// Sample is one reading of the process during the run.
type Sample struct {
	Progress   float64 // 0..1: share of the run done
	Goroutines int
	HeapLive   uint64 // /gc/heap/live:bytes: what the last GC found live
	HeapInUse  uint64 // objects and unused heap
}

// sampler reads goroutines and heap every period until stopped.
type sampler struct {
	mu      sync.Mutex
	samples []Sample
	stop    chan struct{}
	done    chan struct{}
}

func startSampler(period time.Duration, progress func() float64) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			s.take(progress())
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) take(p float64) {
	m := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"}}
	metrics.Read(m)
	smp := Sample{Progress: p, Goroutines: runtime.NumGoroutine(), HeapLive: m[0].Value.Uint64(),
		HeapInUse: m[1].Value.Uint64() + m[2].Value.Uint64()}
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

func (s *sampler) finish() []Sample {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// Window summarises the samples whose progress is in [from, to).
type Window struct {
	N                        int
	MinGoroutines, MaxGorout int
	MinHeapLive, MaxHeapLive uint64
}

func window(ss []Sample, from, to float64) Window {
	w := Window{MinGoroutines: math.MaxInt, MinHeapLive: math.MaxUint64}
	for _, s := range ss {
		if s.Progress < from || s.Progress >= to {
			continue
		}
		w.N++
		w.MinGoroutines = min(w.MinGoroutines, s.Goroutines)
		w.MaxGorout = max(w.MaxGorout, s.Goroutines)
		w.MinHeapLive = min(w.MinHeapLive, s.HeapLive)
		w.MaxHeapLive = max(w.MaxHeapLive, s.HeapLive)
	}
	return w
}
