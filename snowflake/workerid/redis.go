package workerid

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed claim.lua
	claimLua    string
	claimScript = redis.NewScript(claimLua)
	//go:embed renew.lua
	renewLua    string
	renewScript = redis.NewScript(renewLua)
	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)
)

// NewRedis returns a Registry on Redis (single node, Sentinel or Cluster: a slot's keys
// share a hash tag). Claims, renewals and releases are Lua scripts that check the owner
// token; the high-water key, and the ID-space key beside it, live for WithHighWaterTTL
// (default 24h) after the last write.
func NewRedis(c redis.UniversalClient, opts ...Option) (*Registry, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.acks.CheckClient("NewRedis", c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Registry{b: &redisBackend{c: c, cfg: cfg}, cfg: cfg}, nil
}

type redisBackend struct {
	c   redis.UniversalClient
	cfg config
}

func (*redisBackend) name() string { return "redis" }

func (b *redisBackend) claim(ctx context.Context, l *leaseState) (int64, int64, error) {
	open := l.value[:len(l.value)-1] // the script appends the floor and the closing brace
	space := b.cfg.space()
	cmd, notAcked := b.run(ctx, claimScript, l,
		open, l.token, b.cfg.ttl.Milliseconds(), b.cfg.wall().UnixMilli(), b.cfg.hwTTL.Milliseconds(),
		b.cfg.longestTTL().Milliseconds(), space)
	res, err := cmd.Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("workerid: redis claim worker id %d: %w", l.claim.WorkerID, err)
	}
	code, _ := res[0].(int64)
	switch {
	case code == 0 && len(res) == 2:
		holder, _ := res[1].(string)
		s, _ := decodeStored([]byte(holder))
		return 0, 0, &CollisionError{Service: l.claim.Service, WorkerID: l.claim.WorkerID, Holder: s.Claim}
	case code == 2 && len(res) == 2:
		found, _ := res[1].(string)
		return 0, 0, &SpaceMismatchError{Service: l.claim.Service, WorkerID: l.claim.WorkerID, Key: l.key, Slot: found, Registry: space}
	case code != 1 || len(res) != 3:
		return 0, 0, fmt.Errorf("workerid: redis claim: unexpected reply %v", res)
	}
	if notAcked != nil {
		// The caller (Registry.claim) abandons the slot, as any claim that may have
		// taken it and failed.
		return 0, 0, fmt.Errorf("workerid: redis claim worker id %d: %w", l.claim.WorkerID, notAcked)
	}
	floor, _ := res[1].(int64)
	reserve, _ := res[2].(int64)
	return floor, reserve, nil
}

// abandon undoes a failed claim of l.
//
// A Claim's: release.lua, owner-checked (it never deletes another owner's slot), deletes
// the slot if the claim took it and puts the mark back to the floor the claim found
// (recorded in the slot's value): nothing was issued under the claim, and a mark left at
// its reservation would put every retry's floor a TTL further ahead.
//
// A live lease's re-claim of its vanished slot (reclaim): nothing. The slot, if the
// claim took it, is under the lease's own token, and the next renewal finds it there and
// takes the floor the claim recorded (renew.lua). A release here could arrive late, after
// such a renewal let the generator issue, and must then not lower the mark.
func (b *redisBackend) abandon(ctx context.Context, l *leaseState, reclaim bool) error {
	if reclaim {
		return nil
	}
	return b.release(ctx, l, -1)
}

func (b *redisBackend) renew(ctx context.Context, l *leaseState) (renewStatus, int64, int64, time.Duration, error) {
	cmd, notAcked := b.run(ctx, renewScript, l,
		l.token, b.cfg.ttl.Milliseconds(), b.cfg.wall().UnixMilli(), b.cfg.hwTTL.Milliseconds(), b.cfg.space())
	res, err := cmd.Slice()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		if len(res) != 3 {
			return 0, 0, 0, 0, fmt.Errorf("workerid: redis renew: unexpected reply %v", res)
		}
		if notAcked != nil {
			// A failed renewal: the lease keeps the last acknowledged one's deadline and
			// reservation, which a replica promoted now has.
			return 0, 0, 0, 0, fmt.Errorf("workerid: redis renew worker id %d: %w", l.claim.WorkerID, notAcked)
		}
		reserve, _ := res[1].(int64)
		floor, _ := res[2].(int64)
		return renewed, reserve, floor, b.cfg.ttl, nil
	case 0:
		return missing, 0, 0, 0, nil
	default:
		return stolen, 0, 0, 0, nil
	}
}

func (b *redisBackend) release(ctx context.Context, l *leaseState, lastUsed int64) error {
	err := releaseScript.Run(ctx, b.c, []string{l.key, l.hwKey, l.spaceKey}, l.token, lastUsed, b.cfg.hwTTL.Milliseconds(), b.cfg.space()).Err()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}
