package snowflake

import (
	"fmt"
	"math"
	"time"
)

// Layout is how an ID's bits are split between time, worker and sequence. The sign bit is
// always zero, so TimeBits+WorkerBits+SequenceBits must be 63, or 53 for a layout whose IDs
// must survive a JavaScript number (set Bits to 53).
type Layout struct {
	TimeBits     int // milliseconds since the epoch
	WorkerBits   int // WorkerIDs 0..2^WorkerBits-1
	SequenceBits int // IDs per worker per millisecond: 2^SequenceBits
	// Bits is the width the three fields must fill: 63 (the zero value means 63) or 53.
	Bits int
}

var (
	// Layout41x10x12 is the classic layout: 69 years, 1024 workers, 4096 IDs per ms per worker.
	Layout41x10x12 = Layout{TimeBits: 41, WorkerBits: 10, SequenceBits: 12}

	// Layout8x13 is the spec's 8-bit worker / 13-bit sequence variant (256 workers, 8192 IDs
	// per ms). The spec's table leaves one of the 63 bits unused; it goes to time here, which
	// doubles the lifetime to 139 years.
	Layout8x13 = Layout{TimeBits: 42, WorkerBits: 8, SequenceBits: 13}

	// LayoutJSSafe keeps every ID it can ever produce at or below 2^53-1
	// (Number.MAX_SAFE_INTEGER), so IDs survive JSON parsing in browsers as numbers:
	// 69 years, 32 workers, 128 IDs per ms per worker.
	LayoutJSSafe = Layout{TimeBits: 41, WorkerBits: 5, SequenceBits: 7, Bits: 53}

	// DefaultLayout is Layout41x10x12.
	DefaultLayout = Layout41x10x12

	// DefaultEpoch is 2024-01-01T00:00:00Z.
	DefaultEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
)

// MaxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER, 2^53-1.
const MaxSafeInteger = 1<<53 - 1

func (l Layout) width() int {
	if l.Bits == 0 {
		return 63
	}
	return l.Bits
}

// same reports whether l and o split IDs alike (Bits 0 is 63).
func (l Layout) same(o Layout) bool {
	return l.TimeBits == o.TimeBits && l.WorkerBits == o.WorkerBits && l.SequenceBits == o.SequenceBits && l.width() == o.width()
}

// String returns the layout as "time/worker/sequence", e.g. "41/10/12".
func (l Layout) String() string {
	return fmt.Sprintf("%d/%d/%d", l.TimeBits, l.WorkerBits, l.SequenceBits)
}

// Validate reports why l cannot be used, or nil.
func (l Layout) Validate() error {
	w := l.width()
	switch {
	case w != 63 && w != 53:
		return fmt.Errorf("%w: layout %s: Bits is %d, want 63 or 53", ErrInvalid, l, l.Bits)
	case l.TimeBits < 32:
		// Fewer than 32 bits of milliseconds is a lifetime under 50 days.
		return fmt.Errorf("%w: layout %s: %d time bits is a lifetime of %s, want at least 32 bits", ErrInvalid, l, l.TimeBits, time.Duration(int64(1)<<max(l.TimeBits, 0))*time.Millisecond)
	case l.WorkerBits < 0 || l.SequenceBits < 1:
		return fmt.Errorf("%w: layout %s: worker bits must be >= 0 and sequence bits >= 1", ErrInvalid, l)
	case l.TimeBits+l.WorkerBits+l.SequenceBits != w:
		return fmt.Errorf("%w: layout %s: bit widths sum to %d, want %d", ErrInvalid, l, l.TimeBits+l.WorkerBits+l.SequenceBits, w)
	}
	return nil
}

// ValidateEpoch reports why generators of layout l cannot count their IDs' time from epoch
// at the wall time now, or nil. The zero time, an epoch after now, before 1970 or not a
// whole millisecond is ErrInvalid; an epoch whose lifetime for l (see Lifetime) ended by
// now is ErrLifetimeOver. New checks its epoch with it, and so does a workerid Registry
// built WithEpoch.
func (l Layout) ValidateEpoch(epoch, now time.Time) error {
	if err := l.Validate(); err != nil {
		return err
	}
	switch {
	case epoch.IsZero():
		return fmt.Errorf("%w: epoch is the zero time: give the epoch the IDs count from (default %s)", ErrInvalid, DefaultEpoch.Format(time.RFC3339))
	case epoch.After(now):
		return fmt.Errorf("%w: epoch %s is in the future", ErrInvalid, epoch.Format(time.RFC3339Nano))
	case epoch.Before(time.Unix(0, 0)):
		return fmt.Errorf("%w: epoch %s is before 1970", ErrInvalid, epoch.Format(time.RFC3339Nano))
	case epoch.UnixNano() != epoch.UnixMilli()*nsPerMs:
		return fmt.Errorf("%w: epoch %s is not a whole millisecond", ErrInvalid, epoch)
	case (now.UnixNano()-epoch.UnixNano())/nsPerMs > int64(1)<<l.TimeBits-1:
		return fmt.Errorf("%w: epoch %s: layout %s ended at %s", ErrLifetimeOver, epoch.Format(time.RFC3339), l, l.End(epoch).Format(time.RFC3339))
	}
	return nil
}

// MaxWorker is the largest WorkerID the layout can hold.
func (l Layout) MaxWorker() int64 { return 1<<l.WorkerBits - 1 }

// MaxSequence is the largest sequence number in one millisecond.
func (l Layout) MaxSequence() int64 { return 1<<l.SequenceBits - 1 }

// MaxID is the largest ID the layout can produce in its whole lifetime.
func (l Layout) MaxID() int64 { return 1<<l.width() - 1 }

// Lifetime is how long after its epoch the layout runs out of time bits (saturating at the
// largest time.Duration, about 292 years).
func (l Layout) Lifetime() time.Duration {
	if l.TimeBits >= 44 { // 2^44 ms overflows a Duration
		return math.MaxInt64
	}
	return time.Duration(int64(1)<<l.TimeBits) * time.Millisecond
}

// End is the first instant, for the given epoch, at which the layout can no longer issue IDs.
func (l Layout) End(epoch time.Time) time.Time {
	return time.UnixMilli(epoch.UnixMilli() + int64(1)<<min(l.TimeBits, 52)).UTC()
}

// Parts is a decoded ID.
type Parts struct {
	ID       int64
	Time     time.Time // the millisecond the ID was issued in (UTC)
	Worker   int64
	Sequence int64
}

// Decode splits id into its time, worker and sequence for this layout and epoch.
func (l Layout) Decode(epoch time.Time, id int64) (Parts, error) {
	if err := l.Validate(); err != nil {
		return Parts{}, err
	}
	if id < 0 || id > l.MaxID() {
		return Parts{}, fmt.Errorf("%w: id %d is outside layout %s (0..%d)", ErrInvalid, id, l, l.MaxID())
	}
	ms := id >> (l.WorkerBits + l.SequenceBits)
	return Parts{
		ID:       id,
		Time:     time.UnixMilli(epoch.UnixMilli() + ms).UTC(),
		Worker:   (id >> l.SequenceBits) & l.MaxWorker(),
		Sequence: id & l.MaxSequence(),
	}, nil
}

// Decode splits an ID of the default layout and epoch.
func Decode(id int64) (Parts, error) { return DefaultLayout.Decode(DefaultEpoch, id) }
