package main

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
)

// cpuTime is this process's user+system CPU time (getrusage RUSAGE_SELF): the client's work
// alone, since both servers run in processes of their own (redis-server, and the embedded
// etcd in the runner's etcd child).
var cpuTime = testenv.ProcessCPU

// mallocs is the process's cumulative heap allocation count.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// median of xs (0 for none); xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// quantile of sorted durations, nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)) + 0.5)
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// roundOrder returns xs in the order round k of a benchmark runs them: a shuffle seeded by k,
// the same in every run. Rotating the order (an earlier runner) moved which case ran first but
// kept every case's predecessor, and a case's figures depend on the one before it: two
// identical governed-lock cases, one always right after the other, differed by 5-10% in
// pairs/s and client CPU (the one behind faster), whichever was which. Shuffling gives each
// case different neighbours round to round, so the medians over rounds average that out.
func roundOrder[T any](xs []T, k int) []T {
	out := slices.Clone(xs)
	r := rand.New(rand.NewPCG(uint64(k), 0x6c6f636b676f76)) // "lockgov"
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// mean of ds (0 for none).
func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}
