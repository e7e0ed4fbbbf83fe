package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fence"
)

// Resource is the protected resource as one client sees it, on that
// client's own connection.
type Resource interface {
	// Write writes value with lease's fence. It returns nil when applied,
	// an error matching fence.ErrStaleFence (a *fence.StaleFenceError) when
	// refused, and any other error when the outcome is unknown.
	Write(ctx context.Context, lease instrument.Lease, value string) error
	// Read returns the last applied value and its fence.
	Read(ctx context.Context) (value string, f uint64, err error)
}

// Client is one workload client: its own Locker and resource connection.
type Client struct {
	Locker   instrument.Locker
	Resource Resource
}

// Config is a workload.
type Config struct {
	Key     string
	TTL     time.Duration
	Clients []Client
	// Reader reads the resource in a loop when set.
	Reader Resource
	// AcquireTimeout bounds each Acquire (default 2s); OpTimeout each write,
	// read and release (default 2s).
	AcquireTimeout, OpTimeout time.Duration
	// Work is the most a holder works (a random share of it) between seeing
	// its lease alive and writing: the window in which a lease can be lost
	// under the holder.
	Work time.Duration
	// AcquireOptions are added to every Acquire.
	AcquireOptions []instrument.AcquireOption
}

// Workload runs Config's clients until Stop.
type Workload struct {
	cfg      Config
	h        *History
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	accepted atomic.Int64
	acqErrs  sync.Map // error class -> *atomic.Int64
}

// Start starts the clients (and the reader) on history h.
func Start(ctx context.Context, h *History, cfg Config) (*Workload, error) {
	if len(cfg.Clients) == 0 || cfg.Key == "" || cfg.TTL <= 0 {
		return nil, errors.New("chaos: need clients, a key and a TTL")
	}
	if cfg.AcquireTimeout <= 0 {
		cfg.AcquireTimeout = 2 * time.Second
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Workload{cfg: cfg, h: h, cancel: cancel}
	for i, c := range cfg.Clients {
		w.wg.Go(func() { w.client(ctx, i, c) })
	}
	if cfg.Reader != nil {
		w.wg.Go(func() { w.reader(ctx, len(cfg.Clients)) })
	}
	return w, nil
}

// Stop ends the clients and waits for them; every lease is released (or
// its release attempted) before it returns.
func (w *Workload) Stop() {
	w.cancel()
	w.wg.Wait()
}

// Accepted is the number of writes applied so far.
func (w *Workload) Accepted() int64 { return w.accepted.Load() }

// WaitAccepted waits until n more writes than now have been applied (the
// workload makes progress), or ctx ends.
func (w *Workload) WaitAccepted(ctx context.Context, n int64) error {
	target := w.accepted.Load() + n
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for w.accepted.Load() < target {
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %d of %d writes applied: %w", n-(target-w.accepted.Load()), n, context.Cause(ctx))
		case <-t.C:
		}
	}
	return nil
}

// AcquireErrors counts failed acquisitions by class.
func (w *Workload) AcquireErrors() map[string]int64 {
	m := map[string]int64{}
	w.acqErrs.Range(func(k, v any) bool { m[k.(string)] = v.(*atomic.Int64).Load(); return true })
	return m
}

func (w *Workload) countAcqErr(err error) {
	class := "other"
	switch {
	case errors.Is(err, instrument.ErrNotAcquired):
		class = "not_acquired"
	case errors.Is(err, instrument.ErrClockSkew):
		class = "clock_skew"
	case errors.Is(err, instrument.ErrLockLost):
		class = "lost_while_waiting"
	case errors.Is(err, context.DeadlineExceeded):
		class = "deadline"
	}
	v, _ := w.acqErrs.LoadOrStore(class, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// EncodeValue is what client writes with fence as its counter-th write.
func EncodeValue(client int, f uint64, counter int) string {
	return "c" + strconv.Itoa(client) + "/f" + strconv.FormatUint(f, 10) + "/n" + strconv.Itoa(counter)
}

// ValueFence reads the fence back out of an EncodeValue value.
func ValueFence(v string) uint64 {
	for _, part := range strings.Split(v, "/") {
		if f, ok := strings.CutPrefix(part, "f"); ok {
			n, _ := strconv.ParseUint(f, 10, 64)
			return n
		}
	}
	return 0
}

// pace waits d or until ctx ends: the workload's own rhythm (back off after
// an error), not synchronisation.
func pace(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *Workload) client(ctx context.Context, id int, c Client) {
	opts := append([]instrument.AcquireOption{instrument.WithTTL(w.cfg.TTL)}, w.cfg.AcquireOptions...)
	counter := 0
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, w.cfg.AcquireTimeout)
		call := w.h.Now()
		lease, err := c.Locker.Acquire(actx, w.cfg.Key, opts...)
		ret := w.h.Now()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.countAcqErr(err)
				pace(ctx, time.Duration(5+rand.IntN(20))*time.Millisecond)
			}
			continue
		}
		w.h.Add(Op{Client: id, Kind: Acquire, Call: call, Return: ret, Fence: lease.Fence(), Outcome: OK})
		counter++
		w.hold(ctx, id, c, lease, ret, counter)
	}
}

// hold is one critical section: work, check the lease, write, release.
func (w *Workload) hold(ctx context.Context, id int, c Client, lease instrument.Lease, acquired int64, counter int) {
	if w.cfg.Work > 0 {
		pace(ctx, time.Duration(rand.Int64N(int64(w.cfg.Work))))
	}
	// The hold is promised until the last moment the lease was seen alive.
	alive := acquired
	if t := w.h.Now(); lease.Context().Err() == nil {
		alive = t
		value := EncodeValue(id, lease.Fence(), counter)
		// The write does not run on the lease's context: a holder whose
		// lease ends mid-write is what the fence is for.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.OpTimeout)
		call := w.h.Now()
		err := c.Resource.Write(wctx, lease, value)
		ret := w.h.Now()
		cancel()
		op := Op{Client: id, Kind: Write, Call: call, Return: ret, Fence: lease.Fence(), Counter: counter, Value: value}
		var se *fence.StaleFenceError
		switch {
		case err == nil:
			op.Outcome = OK
			w.accepted.Add(1)
		case errors.As(err, &se):
			op.Outcome, op.Stored = Stale, se.Stored
		default:
			op.Outcome, op.Return, op.Err = Unknown, Open, err.Error()
		}
		w.h.Add(op)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.OpTimeout)
	err := lease.Release(rctx)
	cancel()
	end := w.h.Now()
	if err != nil && !errors.Is(err, instrument.ErrNotHeld) {
		// Unknown: the store frees the lock at its TTL at the latest.
		end = Open
	}
	w.h.Add(Op{Client: id, Kind: Release, Call: alive, Return: end, Fence: lease.Fence(), Outcome: OK})
}

func (w *Workload) reader(ctx context.Context, id int) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		call := w.h.Now()
		v, f, err := w.cfg.Reader.Read(rctx)
		ret := w.h.Now()
		cancel()
		op := Op{Client: id, Kind: Read, Call: call, Return: ret, Value: v, Stored: f, Outcome: OK}
		if err != nil {
			op.Outcome, op.Err = Failed, err.Error()
		}
		if ctx.Err() == nil || err == nil {
			w.h.Add(op)
		}
		pace(ctx, time.Duration(10+rand.IntN(10))*time.Millisecond)
	}
}
