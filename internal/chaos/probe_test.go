package chaos

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fence"
)

// probe is a holder the nemesis controls: it takes the lock before a fault
// that loses the lock's write (a failover, a restart without persistence)
// and writes after a newer holder has, with its old fence, whether or not
// its lease has noticed the loss yet.
type probe struct {
	id       int
	lease    instrument.Lease
	acquired int64
	// AliveAtWrite: the probe still believed it held the lock when it wrote
	// (exclusion was broken, and only the fence stood).
	AliveAtWrite bool
}

func startProbe(t *testing.T, ctx context.Context, h *History, id int, l instrument.Locker, ttl time.Duration) *probe {
	t.Helper()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	call := h.Now()
	lease, err := l.Acquire(actx, lockKey, instrument.WithTTL(ttl))
	if err != nil {
		t.Fatalf("probe acquire: %v", err)
	}
	p := &probe{id: id, lease: lease, acquired: h.Now()}
	h.Add(Op{Client: id, Kind: Acquire, Call: call, Return: p.acquired, Fence: lease.Fence(), Outcome: OK})
	return p
}

// writeLate waits for a newer holder's applied write, then writes with the
// probe's fence, records the write and the end of the hold, and releases.
func (p *probe) writeLate(t *testing.T, ctx context.Context, h *History, res Resource) {
	t.Helper()
	f := p.lease.Fence()
	waitFor(t, ctx, "a write above the probe's fence", func() bool { return newerWriteApplied(h, f) })
	alive := p.acquired
	if now := h.Now(); p.lease.Context().Err() == nil {
		alive, p.AliveAtWrite = now, true
	}
	value := EncodeValue(p.id, f, 1)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	call := h.Now()
	err := res.Write(wctx, p.lease, value)
	ret := h.Now()
	cancel()
	op := Op{Client: p.id, Kind: Write, Call: call, Return: ret, Fence: f, Counter: 1, Value: value}
	var se *fence.StaleFenceError
	switch {
	case err == nil:
		op.Outcome = OK
	case errors.As(err, &se):
		op.Outcome, op.Stored = Stale, se.Stored
	default:
		op.Outcome, op.Return, op.Err = Unknown, Open, err.Error()
	}
	h.Add(op)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	_ = p.lease.Release(rctx)
	rcancel()
	h.Add(Op{Client: p.id, Kind: Release, Call: alive, Return: h.Now(), Fence: f, Outcome: OK})
	t.Logf("probe: fence %d, still believed it held the lock when it wrote: %v, write %s", f, p.AliveAtWrite, op.Outcome)
	if op.Outcome != Stale {
		t.Errorf("the probe's late write was %s, want refused as stale", op.Outcome)
	}
}
