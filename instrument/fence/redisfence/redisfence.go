package redisfence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/internal/replicaack"
)

var (
	//go:embed set.lua
	setSrc string
	//go:embed get.lua
	getSrc string

	setScript = redis.NewScript(setSrc)
	getScript = redis.NewScript(getSrc)
)

// Writer writes fenced values to one Redis (single node, Sentinel or
// Cluster). It is safe for concurrent use.
type Writer struct {
	c    redis.UniversalClient
	acks replicaack.Acks
}

// New returns a Writer on c.
func New(c redis.UniversalClient, opts ...Option) (*Writer, error) {
	if c == nil {
		return nil, errors.New("redisfence: nil Redis client")
	}
	var cfg config
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.acks.CheckClient("redisfence", c); err != nil {
		return nil, err
	}
	return &Writer{c: c, acks: cfg.acks}, nil
}

// FenceKey is the key that holds the fence of value key, in key's hash slot.
// It refuses keys whose braces do not form a hash tag (no companion key
// would be in the same slot).
func FenceKey(key string) (string, error) {
	if key == "" {
		return "", errors.New("redisfence: empty key")
	}
	open := strings.IndexByte(key, '{')
	if open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key + ":fenced", nil
		}
	}
	if strings.ContainsAny(key, "{}") {
		return "", fmt.Errorf("redisfence: key %q has braces that do not form a Redis hash tag", key)
	}
	return "{" + key + "}:fenced", nil
}

// Set writes value to key with fence f if f is above the fence stored with
// key (none stored counts as below every fence), or reports written without
// writing when f and value are the ones stored (the same write again). ttl > 0 expires the value
// and its fence together; 0 keeps both. It returns nil when written, a
// *fence.StaleFenceError when refused, and the transport error when the
// outcome is unknown. With WithReplicaAcks, a write that fewer replicas
// acknowledged is an error matching ErrNotReplicated: it is on the
// primary.
func (w *Writer) Set(ctx context.Context, key string, value string, f uint64, ttl time.Duration) error {
	if f == 0 {
		return fence.ErrNoFence
	}
	if ttl < 0 {
		return fmt.Errorf("redisfence: negative TTL %v", ttl)
	}
	if ttl > 0 && ttl < time.Millisecond {
		return fmt.Errorf("redisfence: TTL %v below a millisecond", ttl)
	}
	fk, err := FenceKey(key)
	if err != nil {
		return err
	}
	offered := strconv.FormatUint(f, 10)
	keys, args := []string{key, fk}, []any{value, offered, ttl.Milliseconds()}
	var cmd *redis.Cmd
	var acked error // whether the replicas have the write; nil without WithReplicaAcks
	if w.acks.On() {
		// The touch rewrites the fence key: a resend that found this write
		// stored wrote nothing for WAIT to count.
		var r replicaack.Reply
		cmd, r = w.acks.Run(ctx, ctx, w.c, setScript, keys, fk, args...)
		acked = w.acks.Check(r, ErrNotReplicated, notReplicated)
	} else {
		cmd = setScript.Run(ctx, w.c, keys, args...)
	}
	res, err := cmd.Slice()
	if err != nil {
		return fmt.Errorf("redisfence: set %q: %w", key, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redisfence: set %q: unexpected reply %v", key, res)
	}
	if ok, _ := res[0].(int64); ok == 1 {
		if acked != nil {
			return fmt.Errorf("redisfence: set %q: written on the primary: %w", key, acked)
		}
		return nil
	}
	// A refusal is not waited for: a stored fence above the offered one
	// says a newer lease exists, which no failover undoes.
	s, _ := res[1].(string)
	stored, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("redisfence: set %q: stored fence %q is not a fence: %w", key, s, err)
	}
	return &fence.StaleFenceError{Store: "redis", Key: key, Stored: stored, Offered: f}
}

// Get reads key's value and fence together. A missing key is ("", 0,
// redis.Nil) when neither exists; a value written without a fence reads
// with fence 0.
func (w *Writer) Get(ctx context.Context, key string) (value string, f uint64, err error) {
	fk, err := FenceKey(key)
	if err != nil {
		return "", 0, err
	}
	res, err := getScript.Run(ctx, w.c, []string{key, fk}).Slice()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return "", 0, redis.Nil
		}
		return "", 0, fmt.Errorf("redisfence: get %q: %w", key, err)
	}
	if len(res) != 2 {
		return "", 0, fmt.Errorf("redisfence: get %q: unexpected reply %v", key, res)
	}
	v, vok := res[0].(string)
	fs, fok := res[1].(string)
	if !vok && !fok {
		return "", 0, redis.Nil
	}
	if fok {
		if f, err = strconv.ParseUint(fs, 10, 64); err != nil {
			return "", 0, fmt.Errorf("redisfence: get %q: stored fence %q is not a fence: %w", key, fs, err)
		}
	}
	return v, f, nil
}
