package quota

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/internal/telemetry"
	"github.com/lockgov/lockgov/policy"
)

// Limits of the input, checked before anything is sent to Redis.
const (
	// MaxAmount is the largest amount and the largest balance of one
	// bucket: the scripts compare in Lua numbers (doubles), exact up to
	// 2^53-1. In sharded mode the bound is per shard: a key's total can
	// reach shards x MaxAmount, which Remaining sums exactly (an int64
	// holds 1024 x MaxAmount).
	MaxAmount = 1<<53 - 1
	// MaxKeyBytes bounds a quota key.
	MaxKeyBytes = 512
	// MaxRequestIDBytes bounds a request id.
	MaxRequestIDBytes = 256
)

var (
	// ErrInsufficient is returned by Deduct when the balance (in sharded
	// mode: every shard's balance) is smaller than the amount.
	ErrInsufficient = errors.New("quota: insufficient")
	// ErrRequestIDReused is returned when a request id comes back with
	// another amount than the one it was first used with.
	ErrRequestIDReused = errors.New("quota: request id reused with another amount")
	// ErrOverflow is returned when a credit would take a balance over
	// MaxAmount; nothing is written.
	ErrOverflow = errors.New("quota: balance would overflow")
	// ErrInvalid is wrapped by every bad-input error (amount, key, request
	// id); nothing is written.
	ErrInvalid = errors.New("quota: invalid argument")
)

// Quota deducts from integer balances kept in Redis. It is safe for
// concurrent use.
type Quota struct {
	c        redis.UniversalClient
	cfg      config
	ttlMS    string
	metrics  *telemetry.Children[string, deductCounters]
	matcher  *policy.Matcher
	degraded *storefail.Reporter
	tracer   trace.Tracer
}

// ScopeName is the instrumentation scope of the spans a Quota emits.
const ScopeName = "github.com/lockgov/lockgov/instrument/quota"

var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// New returns a Quota on c. c may be a single node, a Sentinel failover
// client or a Cluster client.
func New(c redis.UniversalClient, opts ...Option) (*Quota, error) {
	if c == nil {
		return nil, errors.New("quota: nil client")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.acks.CheckClient("quota", c); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.reg)
	if err != nil {
		return nil, err
	}
	degraded, err := storefail.NewReporter(storefail.Quota, cfg.reg, cfg.logger)
	if err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	tp := cfg.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Quota{
		c:        c,
		cfg:      cfg,
		ttlMS:    strconv.FormatInt(cfg.requestTTL.Milliseconds(), 10),
		metrics:  m,
		matcher:  policy.NewMatcher(cfg.policy),
		degraded: degraded,
		tracer:   tp.Tracer(ScopeName),
	}, nil
}

// Set makes amount the balance of key (split evenly over the shards in
// sharded mode). amount may be 0. Set is not atomic with deductions running
// at the same time across shards: use it to initialise a key, Add to top
// one up.
func (q *Quota) Set(ctx context.Context, key string, amount int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if amount < 0 || amount > MaxAmount {
		return fmt.Errorf("%w: Set amount %d: want 0..%d", ErrInvalid, amount, int64(MaxAmount))
	}
	parts := split(amount, q.cfg.shards)
	_, err := q.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, a := range parts {
			p.HSet(ctx, q.bucket(key, i), "remain", a)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("quota: set %q: %w", key, err)
	}
	return nil
}

// Add credits amount (> 0) to key, split evenly over the shards in sharded
// mode. Each shard's credit applies once even when go-redis resends it
// after a lost reply (a random record per call, see credit.lua), but a
// caller's own retry of Add is a second Add: use Refund with a request id
// for a credit that may be retried.
func (q *Quota) Add(ctx context.Context, key string, amount int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkAmount(amount); err != nil {
		return err
	}
	for i, a := range split(amount, q.cfg.shards) {
		if a == 0 {
			continue
		}
		if err := q.creditCall(ctx, q.bucket(key, i), a); err != nil {
			return fmt.Errorf("quota: add %q: %w", key, err)
		}
	}
	return nil
}

// Deduct takes amount (> 0) from key in one atomic step, or returns
// ErrInsufficient and takes nothing. A requestID that was already applied
// (a retry) deducts nothing and returns the first call's answer, including
// ErrInsufficient, for the request TTL.
//
// remaining is the balance after the deduction; in sharded mode it is the
// balance of the shard that served it (Remaining sums the shards).
//
// When Redis cannot be reached Deduct returns the transport error, or,
// with WithFallback, the fallback's answer. With WithReplicaAcks, an error
// holding a *NotReplicatedError says the primary has applied (or refused)
// the deduction and too few replicas have it yet: retry with the same
// request id.
func (q *Quota) Deduct(ctx context.Context, key string, amount int64, requestID string) (remaining int64, err error) {
	ctx, span := q.tracer.Start(ctx, "quota deduct", clientSpan...)
	defer span.End()
	rem, result, err := q.deduct(ctx, key, amount, requestID)
	label := q.label(key)
	q.metrics.Get(label).count(result)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("quota.key_pattern", label),
			attribute.Int64("quota.amount", amount),
			attribute.Int("quota.shards", q.cfg.shards),
			attribute.String("quota.result", result),
			attribute.String("db.system.name", "redis"),
		)
		if err != nil && result != "insufficient" && result != "replay_insufficient" {
			span.RecordError(telemetry.Keyless(err, key))
			span.SetStatus(codes.Error, result)
		}
	}
	return rem, err
}

// deduct is Deduct without the span and the count: it returns the result
// label.
func (q *Quota) deduct(ctx context.Context, key string, amount int64, requestID string) (int64, string, error) {
	if err := checkArgs(key, amount, requestID); err != nil {
		return 0, "invalid", err
	}
	a := strconv.FormatInt(amount, 10)
	n := q.cfg.shards
	start := q.shardOf(requestID)
	replayed := true
	// The order of the shards depends on the request id only, so a retry
	// visits them in the first call's order and finds its records.
	for j := range n {
		b := q.bucket(key, (start+j)%n)
		rec := record(b, 'd', requestID)
		cmd, ackErr := q.run(ctx, deductScript, []string{b, rec}, rec, a, q.ttlMS)
		res, err := cmd.Int64Slice()
		if err != nil {
			if q.cfg.fallback != nil && storefail.Ended(ctx) == nil && storefail.Unavailable(err) {
				q.degraded.Degraded(err)
				trace.SpanFromContext(ctx).AddEvent("store unreachable: the fallback decides")
				rem, ferr := q.cfg.fallback(ctx, key, amount, requestID)
				return rem, "degraded", ferr
			}
			return 0, "error", fmt.Errorf("quota: deduct %q: %w", key, scriptErr(err))
		}
		replayed = replayed && res[0] == 1
		if res[1] >= 0 {
			if ackErr != nil {
				return 0, "not_replicated", fmt.Errorf("quota: deduct %q: deducted on the primary, not yet on enough replicas (retry with the same request id): %w", key, ackErr)
			}
			if replayed {
				return res[1], "replay", nil
			}
			return res[1], "ok", nil
		}
		// A shard too short for the amount: its -1 record sends a retry
		// on to the next shard, so the next visit waits until the replicas
		// have it. A failover to a replica without it, after the next
		// shard's deduction was acknowledged, would let a retry deduct
		// here too once a refund filled this shard.
		if ackErr != nil {
			return 0, "not_replicated", fmt.Errorf("quota: deduct %q: refused by a shard on the primary as insufficient, not yet on enough replicas, no other shard tried (retry with the same request id): %w", key, ackErr)
		}
	}
	result := "insufficient"
	if replayed {
		result = "replay_insufficient"
	}
	return 0, result, fmt.Errorf("quota: deduct %d from %q: %w", amount, key, ErrInsufficient)
}

// Refund credits amount (> 0) back to key at most once per requestID (use
// a request id of its own, not the deduction's) and returns the balance
// after it (in sharded mode, the balance of the shard credited). It fails
// closed: when Redis cannot be reached it returns the transport error, and
// a retry with the same request id credits once.
func (q *Quota) Refund(ctx context.Context, key string, amount int64, requestID string) (int64, error) {
	ctx, span := q.tracer.Start(ctx, "quota refund", clientSpan...)
	defer span.End()
	rem, replayed, err := q.refund(ctx, key, amount, requestID)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("quota.key_pattern", q.label(key)),
			attribute.Int64("quota.amount", amount),
			attribute.Bool("quota.replayed", replayed),
			attribute.String("db.system.name", "redis"),
		)
		if err != nil {
			span.RecordError(telemetry.Keyless(err, key))
			span.SetStatus(codes.Error, "refund failed")
		}
	}
	return rem, err
}

func (q *Quota) refund(ctx context.Context, key string, amount int64, requestID string) (int64, bool, error) {
	if err := checkArgs(key, amount, requestID); err != nil {
		return 0, false, err
	}
	b := q.bucket(key, q.shardOf(requestID))
	rec := record(b, 'r', requestID)
	cmd, ackErr := q.run(ctx, creditScript, []string{b, rec}, rec, amount, int64(MaxAmount), q.cfg.requestTTL.Milliseconds())
	rem, replayed, err := creditReply(cmd)
	if err != nil {
		return 0, false, fmt.Errorf("quota: refund %q: %w", key, err)
	}
	if ackErr != nil {
		return 0, replayed, fmt.Errorf("quota: refund %q: credited on the primary, not yet on enough replicas (retry with the same request id): %w", key, ackErr)
	}
	return rem, replayed, nil
}

// label is the bounded metric label of key: a policy pattern or the
// normalised key; "other" for a key that is not valid input.
func (q *Quota) label(key string) string {
	if checkKey(key) != nil {
		return policy.OtherLabel
	}
	l, _ := q.matcher.Match(key)
	return l
}

// Remaining returns the balance of key: the sum of its shards in sharded
// mode, read in one pipeline but not one atomic step, so under concurrent
// deductions it is a value each shard had at some instant. A key never set
// reads 0.
func (q *Quota) Remaining(ctx context.Context, key string) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	vals, err := q.balances(ctx, key)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, v := range vals {
		sum += v
	}
	return sum, nil
}

// Rebalance evens out the shards of key, so that deductions stop falling
// back from drained shards to the few that still hold units, and an
// amount up to the mean fits any shard again. It moves only the excess of the
// shards above the mean (each take is atomic, so no shard goes negative)
// and needs no global lock; deductions keep running meanwhile. Units in
// transit are lost if the process dies between a take and the credit that
// follows it. With one shard it does nothing.
func (q *Quota) Rebalance(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	n := q.cfg.shards
	if n == 1 {
		return nil
	}
	vals, err := q.balances(ctx, key)
	if err != nil {
		return err
	}
	var sum int64
	for _, v := range vals {
		sum += v
	}
	target := split(sum, n)
	var pool int64
	for i, v := range vals {
		if v <= target[i] {
			continue
		}
		b := q.bucket(key, i)
		took, err := takeScript.Run(ctx, q.c, []string{b, b + ":t:" + callID()}, v-target[i], callRecordTTL(ctx, q.cfg.requestTTL)).Int64()
		if err != nil {
			// The take may have run with its reply lost: say what it
			// could have moved, not only what was heard.
			return fmt.Errorf("quota: rebalance %q: %w (%d units taken and not yet given back, and up to %d more if this unanswered take ran)", key, err, pool, v-target[i])
		}
		pool += took
	}
	for i, v := range vals {
		if pool == 0 {
			break
		}
		if v >= target[i] {
			continue
		}
		give := min(target[i]-v, pool)
		if err := q.creditCall(ctx, q.bucket(key, i), give); err != nil {
			return fmt.Errorf("quota: rebalance %q: %w (%d units taken and not yet given back, %d fewer if this unanswered credit ran)", key, err, pool, give)
		}
		pool -= give
	}
	if pool > 0 { // deductions emptied shards meanwhile: the rest goes to the first
		if err := q.creditCall(ctx, q.bucket(key, 0), pool); err != nil {
			return fmt.Errorf("quota: rebalance %q: %w (%d units taken and not yet given back, none if this unanswered credit ran)", key, err, pool)
		}
	}
	return nil
}

// credit runs credit.lua: amount onto bucket, at most once per record,
// which lives ttlMS.
func (q *Quota) credit(ctx context.Context, bucket, record string, ttlMS, amount int64) (int64, bool, error) {
	return creditReply(creditScript.Run(ctx, q.c, []string{bucket, record}, amount, int64(MaxAmount), ttlMS))
}

// creditReply decodes credit.lua's reply: the balance after the credit, and
// whether the record was there already.
func creditReply(cmd *redis.Cmd) (int64, bool, error) {
	res, err := cmd.Int64Slice()
	if err != nil {
		return 0, false, scriptErr(err)
	}
	return res[1], res[0] == 1, nil
}

func (q *Quota) balances(ctx context.Context, key string) ([]int64, error) {
	cmds := make([]*redis.StringCmd, q.cfg.shards)
	_, err := q.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGet(ctx, q.bucket(key, i), "remain")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("quota: read %q: %w", key, err)
	}
	vals := make([]int64, len(cmds))
	for i, c := range cmds {
		v, err := c.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("quota: read %q: %w", key, err)
		}
		vals[i] = v
	}
	return vals, nil
}

// bucket is the Redis key of shard i of key. The hash tag holds the key
// and, in sharded mode, the shard number, so each shard has its own slot
// while its request-id records (bucket + suffix) share it.
func (q *Quota) bucket(key string, i int) string {
	if q.cfg.shards == 1 {
		return q.cfg.prefix + "{" + key + "}"
	}
	return q.cfg.prefix + "{" + key + "#" + strconv.Itoa(i) + "}"
}

// record is the key of the request-id record of kind ('d' deduction, 'r'
// refund) for requestID in bucket: bucket + ":d:" + id. An id holding '}'
// goes in as its SHA-256 instead, after ":d#": a bucket ends in '}' and the
// rest of a record then holds none, so a record's last '}' ends its bucket
// and no two (bucket, kind, id) share a record. Before, key "a}:d:b" with
// id "c" and key "a" with id "b}:d:c" both made "...{a}:d:b}:d:c", and the
// second Deduct replayed the first one's answer without taking anything.
// Ids without '}' keep the record they always had.
func record(bucket string, kind byte, requestID string) string {
	if !strings.Contains(requestID, "}") {
		return bucket + ":" + string(kind) + ":" + requestID
	}
	sum := sha256.Sum256([]byte(requestID))
	return bucket + ":" + string(kind) + "#" + hex.EncodeToString(sum[:])
}

func (q *Quota) shardOf(requestID string) int {
	if q.cfg.shards == 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(requestID))
	return int(h.Sum32() % uint32(q.cfg.shards))
}

// split divides amount into n parts differing by at most one.
func split(amount int64, n int) []int64 {
	parts := make([]int64, n)
	for i := range parts {
		parts[i] = amount / int64(n)
		if int64(i) < amount%int64(n) {
			parts[i]++
		}
	}
	return parts
}

func scriptErr(err error) error {
	switch {
	case strings.Contains(err.Error(), "request id reused"):
		return ErrRequestIDReused
	case strings.Contains(err.Error(), "would overflow"):
		return ErrOverflow
	}
	return err
}

func checkArgs(key string, amount int64, requestID string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkAmount(amount); err != nil {
		return err
	}
	if requestID == "" {
		return fmt.Errorf("%w: empty request id", ErrInvalid)
	}
	if len(requestID) > MaxRequestIDBytes {
		return fmt.Errorf("%w: request id of %d bytes: at most %d", ErrInvalid, len(requestID), MaxRequestIDBytes)
	}
	return nil
}

func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if len(key) > MaxKeyBytes {
		return fmt.Errorf("%w: key of %d bytes: at most %d", ErrInvalid, len(key), MaxKeyBytes)
	}
	return nil
}

func checkAmount(amount int64) error {
	if amount <= 0 || amount > MaxAmount {
		return fmt.Errorf("%w: amount %d: want 1..%d", ErrInvalid, amount, int64(MaxAmount))
	}
	return nil
}

// deductCounters are the lockgov_quota_deduct_total children of one key
// pattern, by result.
type deductCounters map[string]prometheus.Counter

func newMetrics(reg prometheus.Registerer) (*telemetry.Children[string, deductCounters], error) {
	vec := telemetry.QuotaDeductTotal.CounterVec(nil)
	var err error
	telemetry.Register(reg, &vec, &err)
	if err != nil {
		return nil, fmt.Errorf("quota: register metrics: %w", err)
	}
	return &telemetry.Children[string, deductCounters]{New: func(pattern string) *deductCounters {
		m := deductCounters{}
		for _, r := range telemetry.QuotaDeductTotal.Values["result"] {
			m[r] = vec.WithLabelValues(pattern, r)
		}
		return &m
	}}, nil
}

func (m *deductCounters) count(result string) { (*m)[result].Inc() }

// creditCall credits amount onto bucket once for this call (Add and
// Rebalance, which have no request id), a resend after a lost reply
// included.
func (q *Quota) creditCall(ctx context.Context, bucket string, amount int64) error {
	_, _, err := q.credit(ctx, bucket, bucket+":c:"+callID(), callRecordTTL(ctx, q.cfg.requestTTL), amount)
	return err
}

// callID names one call of a script that has no request id of its own (Add's
// and Rebalance's steps), so that its record tells a resend of that call
// from a new one: 128 random bits, hex.
// stallMargin is how long after the caller's deadline Add's and Rebalance's
// call records live: a resend that go-redis sent before the deadline runs
// when redis-server reads it, which a stalled server (a fork, a slow
// command, a paused VM) does late. With a second of margin, a 3 s stall
// after a lost reply credited an Add twice and took a Rebalance's units
// twice (found by a review on real servers).
const stallMargin = time.Minute

// callRecordTTL is the lifetime in milliseconds of a call record (Add,
// Rebalance): the caller's time left plus stallMargin, at most limit.
func callRecordTTL(ctx context.Context, limit time.Duration) int64 {
	return storefail.ResendWindowAfter(ctx, stallMargin, limit).Milliseconds()
}

func callID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
