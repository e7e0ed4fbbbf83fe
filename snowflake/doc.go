// Package snowflake issues 64-bit, time-ordered IDs that cannot duplicate, whatever the
// wall clock does, at the speed limit of their bit layout.
//
//	g, err := snowflake.New(7) // WorkerID 7, layout 41/10/12, epoch 2024-01-01
//	id, err := g.NextID(ctx)
//	parts, _ := g.Decode(id) // time, worker, sequence
//
// # Layouts
//
// An ID is a zero sign bit, then milliseconds since the epoch, the WorkerID and a sequence
// number within the millisecond. DefaultLayout is 41/10/12 (69 years, 1024 workers, 4096 IDs
// per ms); Layout8x13 is the spec's 8-bit worker, 13-bit sequence variant; LayoutJSSafe
// keeps every ID within 2^53-1 for its whole lifetime. Widths must sum to 63 (53 for
// JavaScript-safe layouts); Layout.End says when a layout runs out of time. To send int64
// IDs to JavaScript clients as strings, use the ID type in JSON structs.
//
// # Clock
//
// The timestamp is the wall clock, so IDs from different machines sort by when they were
// made. Reading the wall clock costs two clock reads, so the generator reads it once per
// millisecond it enters and in between advances that reading with the monotonic clock alone;
// a wall-clock step is therefore seen at the next millisecond boundary. Each read is compared
// with the last millisecond the generator used (one CAS-updated uint64 holds that and the
// sequence; issuing takes no mutex). A clock that is behind by at most MaxWait (default 5ms)
// is waited out, honouring the caller's context; a larger step returns *ClockBackwardsError
// (errors.Is ErrClockBackwards) with the offset, and the caller degrades or retries
// elsewhere. A used-up sequence waits for the next millisecond, spinning with
// runtime.Gosched rather than sleeping, because timers can wake a millisecond late. Only one
// caller at a time waits for the clock; others that must wait too park until it is done
// (still honouring their contexts), so goroutines at the layout's limit do not all spin.
// Forward steps are taken as they come: IDs jump ahead, and stay unique.
//
// # Clock skew across the fleet
//
// WithSkewSource makes NextID and Fill refuse with *ClockSkewError (errors.Is ErrClockSkew,
// with the offset) while the source says this process's clock is in the reject tier against
// its store; a generator bound to a workerid.Lease uses the lease's heartbeat measurement by
// default. The check is one call per NextID or Fill.
//
// # Restarts and WorkerIDs
//
// A Generator remembers the last millisecond it used only in memory. A process that restarts
// after the wall clock went back could reuse time it already used, and two processes with
// the same WorkerID would issue the same IDs. Both are what package workerid prevents: bind
// the generator to a workerid.Lease with WithLease, and it never issues an ID at or below the
// high-water mark persisted by the slot's previous holder, and stops (ErrWorkerLeaseLost)
// before its lease could have expired, measured on the local monotonic clock. A lease binds
// one generator: New refuses a second on the same lease (ErrInvalid), as the two would
// issue the same IDs; share the first, which is safe for concurrent use.
//
// The high-water mark is a Unix millisecond, while an ID holds milliseconds since its
// generator's epoch, split by its layout: every generator on a WorkerID's key prefix must
// use the same epoch and layout, or one with a later epoch reissues, above the mark, the
// IDs of one with an earlier epoch. New refuses (ErrInvalid) a generator whose layout or
// epoch differs from its lease's Registry's ID space (workerid.WithLayout and
// workerid.WithEpoch, default DefaultLayout and DefaultEpoch), and the Registry records
// that space beside the slot's mark, so that a Registry of another space is refused the
// WorkerID.
//
// # Speed
//
// The hot path, a millisecond with sequence room left, is one monotonic clock read and one
// compare-and-swap, without allocation. A caller that loses the compare-and-swap to another
// steps aside for 3 µs before it tries again, so that under contention the winner issues a
// run of IDs while the state's cache line stays on its core, instead of the line moving
// between cores on every ID. (On the 2-vCPU benchmark VM, two goroutines on one generator
// ran at 0.46-1.25x bwmarrin/snowflake's speed without it and 0.95-1.16x with it.) Fill and
// NextN reserve a whole millisecond's remaining sequence numbers with one compare-and-swap.
// Segment pre-generates IDs in the background. See docs/BENCHMARKS.md.
package snowflake
