package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/bench/internal/floor"
	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// handoffs are the contended cases: one handoff per operation between two
// sides, each with a client of its own, taking turns as holder and waiter,
// as the runner's contenders do. An operation is what the server runs for
// one handoff in the steady state of a contended lock: the waiter's
// attempt that queues (lockgov) or registers (the floor's ZADD), and the
// holder's release that hands over and publishes, and the message's
// delivery to the waiter's subscriber. The operation ends when the waiter
// has it, so nothing of it spills into the next.
type handoffs struct {
	clients [2]*redis.Client
	// queued[i] has a value when side i's client got a reply to an attempt
	// that did not take the lock: the waiter is queued, the holder may go.
	queued [2]chan struct{}
	// ps are the floor's subscribers, one per side.
	ps      [2]*redis.PubSub
	lockers [2][2]*redislock.Locker // [mode][side]: default wait, Fair()
}

func newHandoffs(c *redis.Client) (*handoffs, error) {
	h := &handoffs{}
	ctx := context.Background()
	for i := range h.clients {
		o := c.Options()
		cl := redis.NewClient(&redis.Options{Addr: o.Addr, ContextTimeoutEnabled: true, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout})
		h.queued[i] = make(chan struct{}, 1)
		cl.AddHook(queuedHook(h.queued[i]))
		h.clients[i] = cl
		h.ps[i] = cl.Subscribe(ctx, floorChannel(i))
		if _, err := h.ps[i].Receive(ctx); err != nil {
			h.close()
			return nil, fmt.Errorf("subscribe %s: %w", floorChannel(i), err)
		}
		for mode, opts := range [][]redislock.Option{nil, {redislock.Fair()}} {
			l, err := redislock.New(cl, opts...)
			if err != nil {
				h.close()
				return nil, err
			}
			h.lockers[mode][i] = l
		}
	}
	return h, nil
}

func floorChannel(i int) string { return fmt.Sprintf("cost:floor:%d", i) }

func (h *handoffs) close() {
	for _, mode := range h.lockers {
		for _, l := range mode {
			if l != nil {
				_ = l.Close()
			}
		}
	}
	for i := range h.clients {
		if h.ps[i] != nil {
			_ = h.ps[i].Close()
		}
		if h.clients[i] != nil {
			_ = h.clients[i].Close()
		}
	}
}

// queuedHook signals ch when an attempt has queued its waiter
// (notAcquired).
func queuedHook(ch chan struct{}) redis.Hook { return hook{ch} }

type hook struct{ ch chan struct{} }

func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && notAcquired(cmd) {
			select {
			case h.ch <- struct{}{}:
			default:
			}
		}
		return err
	}
}

// notAcquired reports whether cmd is an acquire attempt that queued its
// waiter and did not take the lock: four keys (the lock, the fence, the
// queue, the deadlines: a waiter's attempt; default wait's first attempt
// has two), not acquire_fair.lua's single attempt (ARGV[6] "1"), and a
// reply that is an array starting with 0.
func notAcquired(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 3 || fmt.Sprint(args[2]) != "4" || len(args) > 12 && fmt.Sprint(args[12]) == "1" {
		return false
	}
	switch c := cmd.(type) {
	case *redis.IntSliceCmd:
		v := c.Val()
		return len(v) > 0 && v[0] == 0
	case *redis.Cmd:
		v, ok := c.Val().([]any)
		return ok && len(v) > 0 && v[0] == int64(0)
	}
	return false
}

func (hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// floor is one handoff of the contention table's floor: the waiter
// registers (one ZADD), the holder runs floor.Handoff publishing to the
// waiter's channel, and the waiter's subscriber receives the message.
func (h *handoffs) floor(ctx context.Context, i int) error {
	holder, waiter := i&1, 1-i&1
	if err := h.clients[waiter].ZAdd(ctx, "cost:floor:waits", redis.Z{Score: float64(i), Member: waiter}).Err(); err != nil {
		return err
	}
	keys := []string{"cost:floor", "cost:floor:tomb", "cost:floor:queue", "cost:floor:fence"}
	if err := floor.Handoff.Run(ctx, h.clients[holder], keys, floorChannel(waiter), "next-holder", 10000, 1000).Err(); err != nil {
		return err
	}
	_, err := h.ps[waiter].ReceiveMessage(ctx)
	return err
}

// lockgov returns one lockgov handoff in mode (0 default wait, 1 Fair):
// the waiter's Acquire queues, the holder's Release hands the lock over,
// and the waiter's Acquire returns holding it. The first operation only
// takes the lock.
func (h *handoffs) lockgov(mode int) func(context.Context, int) error {
	var held instrument.Lease
	holder := 0
	key := "lock:cost:handoff:" + strconv.Itoa(mode)
	return func(ctx context.Context, _ int) error {
		if held == nil {
			l, err := h.lockers[mode][holder].Acquire(ctx, key, instrument.WithTTL(30*time.Second), instrument.FailFast())
			if err != nil {
				return err
			}
			held = l
			return nil
		}
		waiter := 1 - holder
		select { // a signal left from the waiter's last turn as holder
		case <-h.queued[waiter]:
		default:
		}
		type result struct {
			l   instrument.Lease
			err error
		}
		got := make(chan result, 1)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		go func() {
			l, err := h.lockers[mode][waiter].Acquire(wctx, key, instrument.WithTTL(30*time.Second))
			got <- result{l, err}
		}()
		select {
		case <-h.queued[waiter]:
		case r := <-got:
			if r.err == nil {
				_ = r.l.Release(ctx)
				return errors.New("handoff: the waiter took a lock that was held")
			}
			return r.err
		}
		if err := held.Release(ctx); err != nil {
			return err
		}
		r := <-got
		if r.err != nil {
			return r.err
		}
		held, holder = r.l, waiter
		return nil
	}
}
