package agent

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument/fleet"
)

// Instance is one governed process as its heartbeat describes it, without
// its lock lists (their counts stand in for them).
type Instance struct {
	Store              string           `json:"store"`
	Instance           string           `json:"instance"`
	Service            string           `json:"service"`
	Version            string           `json:"version,omitempty"`
	Host               string           `json:"host,omitempty"`
	PID                int              `json:"pid,omitempty"`
	StartedAt          time.Time        `json:"started_at"`
	SentAt             time.Time        `json:"sent_at"`
	ClockOffsetSeconds *float64         `json:"clock_offset_seconds,omitempty"`
	Tier               string           `json:"tier,omitempty"`
	WorkerIDs          []fleet.WorkerID `json:"worker_ids,omitempty"`
	HeldLocks          int              `json:"held_locks"`
	// FallbackLocks are the held locks that are process-local stand-ins
	// for the store's (FailOpen during an outage; counted in HeldLocks
	// too): a process running on them excludes only its own goroutines.
	FallbackLocks int `json:"fallback_locks,omitempty"`
	Waiting       int `json:"waiting"`
}

func instanceOf(storeName string, hb *fleet.Heartbeat) Instance {
	i := Instance{Store: storeName, Instance: hb.Instance, Service: hb.Service, Version: hb.Version, Host: hb.Host,
		PID: hb.PID, StartedAt: hb.StartedAt, SentAt: hb.SentAt, Tier: hb.Tier, WorkerIDs: hb.WorkerIDs,
		HeldLocks: len(hb.Held), Waiting: len(hb.Waiting)}
	for _, h := range hb.Held {
		if h.Fallback {
			i.FallbackLocks++
		}
	}
	if hb.Clock != nil {
		off := hb.Clock.Offset.Seconds()
		i.ClockOffsetSeconds = &off
	}
	return i
}

// readInstances reads up to limit heartbeats of s. Values that are not
// heartbeats are skipped, and so are keys without a TTL (a lease on etcd),
// as the detectors skip them: a publisher writes every beat under one, so a
// key without it (a PERSIST, a copy or restore that dropped TTLs, a key
// written by hand) proves no live process, and listing it would keep a
// process gone long ago, and its last clock offset in the skew gauges,
// for good. A key SCAN returns twice is read once.
func readInstances(ctx context.Context, s *store, limit int) ([]Instance, error) {
	var out []Instance
	if limit <= 0 {
		return nil, nil
	}
	add := func(v []byte) bool {
		if hb, err := fleet.Decode(v); err == nil {
			out = append(out, instanceOf(s.name, hb))
		}
		return len(out) < limit
	}
	if s.etcd != nil {
		start, end := fleet.EtcdPrefix, clientv3.GetPrefixRangeEnd(fleet.EtcdPrefix)
		for {
			resp, err := s.etcd.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(scanBatch))
			if err != nil {
				return out, err
			}
			for _, kv := range resp.Kvs {
				if kv.Lease == 0 {
					continue
				}
				if !add(kv.Value) {
					return out, nil
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				return out, nil
			}
			start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	stop := errors.New("stop")
	seen := map[string]bool{}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, fleet.RedisPrefix+"*", scanBatch).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				pipe := c.Pipeline()
				gets := make([]*redis.StringCmd, len(keys))
				ttls := make([]*redis.DurationCmd, len(keys))
				for i, k := range keys {
					gets[i], ttls[i] = pipe.Get(ctx, k), pipe.PTTL(ctx, k)
				}
				_, _ = pipe.Exec(ctx)
				for i, cmd := range gets {
					v, err := cmd.Bytes()
					if err != nil || seen[keys[i]] {
						continue
					}
					if d, err := ttls[i].Result(); err != nil || d <= 0 {
						continue
					}
					seen[keys[i]] = true
					if !add(v) {
						return stop
					}
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	err := forEachPrimary(ctx, s.redis, func(c redis.Cmdable) error { return scan(ctx, c) })
	if errors.Is(err, stop) {
		err = nil
	}
	return out, err
}
