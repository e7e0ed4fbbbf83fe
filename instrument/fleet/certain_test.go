package fleet

import (
	"testing"
	"time"
)

func TestClockSample_CertainDiscountsHalfTheRoundTrip(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct{ offset, rtt, want time.Duration }{
		{700 * ms, 0, 700 * ms},
		{700 * ms, 200 * ms, 600 * ms},
		{-700 * ms, 200 * ms, -600 * ms},
		// A loaded machine: 174 ms measured with a 350 ms round trip says
		// nothing about the clock.
		{174 * ms, 350 * ms, 0},
		{-174 * ms, 350 * ms, 0},
		{0, 0, 0},
	} {
		s := ClockSample{Offset: c.offset, RTT: c.rtt}
		if got := s.Certain(); got != c.want {
			t.Errorf("offset %v rtt %v: Certain() = %v, want %v", c.offset, c.rtt, got, c.want)
		}
	}
}
