package fleet

import (
	"context"
	"errors"
	"time"
)

// ClockSamples is how many TIME round trips one measurement takes; the one
// with the smallest round trip wins.
const ClockSamples = 5

// measureOffset measures this process's wall clock (now) against the
// store's. Each sample reads now, asks the store its time, and reads the
// monotonic clock around the call: the store's answer is taken to be the
// store's time at the round trip's midpoint, so offset = local midpoint -
// store time, and its error is at most half the round trip. A store that
// exposes no clock returns ErrNoStoreTime.
func measureOffset(ctx context.Context, s Store, now func() time.Time) (*ClockSample, error) {
	var best *ClockSample
	var lastErr error
	for range ClockSamples {
		if ctx.Err() != nil {
			break
		}
		wall := now()
		t0 := time.Now()
		st, err := s.Time(ctx)
		rtt := time.Since(t0)
		if err != nil {
			if errors.Is(err, ErrNoStoreTime) {
				return nil, err
			}
			lastErr = err
			continue
		}
		if best != nil && rtt >= best.RTT {
			continue
		}
		mid := wall.Add(rtt / 2)
		best = &ClockSample{Offset: mid.Sub(st), RTT: rtt, MeasuredAt: mid.UTC(), Source: ClockSourceStore}
	}
	if best == nil {
		if lastErr == nil {
			lastErr = ctx.Err()
		}
		return nil, lastErr
	}
	return best, nil
}
