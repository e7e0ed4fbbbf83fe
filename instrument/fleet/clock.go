package fleet

import (
	"context"
	"errors"
	"time"
)

// ClockSamples is how many TIME round trips one measurement takes at most;
// the one with the smallest round trip wins.
const ClockSamples = 5

// errNoTimeToSample is measureOffset's answer when it started no sample:
// none could have finished before the samples' deadline.
var errNoTimeToSample = errors.New("fleet: no time left in the beat for a clock sample")

// measureOffset measures this process's wall clock (now) against the
// store's. Each sample reads now, asks the store its time, and reads the
// monotonic clock around the call: the store's answer is taken to be the
// store's time at the round trip's midpoint, so offset = local midpoint -
// store time, and its error is at most half the round trip. A store that
// exposes no clock returns ErrNoStoreTime.
//
// A sample starts only while ctx's deadline leaves it one and a half times
// the last round trip to the store (rtt, then each sample's own), room for
// a round trip half as slow again as the last: a deadline that cuts a
// reply mid-read makes the client drop the connection, and the write that
// follows the samples then pays a new connection's handshake out of its
// share of the beat (on a store a third of the timeout away it never
// fitted). With no round trip known yet, the first sample starts
// regardless. It returns the last round trip it saw, rtt when it took none.
func measureOffset(ctx context.Context, s Store, now func() time.Time, rtt time.Duration) (*ClockSample, time.Duration, error) {
	deadline, bounded := ctx.Deadline()
	var best *ClockSample
	lastErr := errNoTimeToSample
	for range ClockSamples {
		if ctx.Err() != nil || bounded && time.Until(deadline) < rtt*3/2 {
			break
		}
		wall := now()
		t0 := time.Now()
		st, err := s.Time(ctx)
		// A failed sample took at least this long too: the next one is
		// judged by it, so a store that just became slow is not sampled
		// into the deadline again.
		rtt = time.Since(t0)
		if err != nil {
			if errors.Is(err, ErrNoStoreTime) {
				return nil, rtt, err
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
		if err := ctx.Err(); err != nil && errors.Is(lastErr, errNoTimeToSample) {
			lastErr = err
		}
		return nil, rtt, lastErr
	}
	return best, rtt, nil
}
