package idempotency

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/internal/telemetry"
)

var (
	//go:embed begin.lua
	beginSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed finish.lua
	finishSrc string

	beginScript  = redis.NewScript(beginSrc)
	renewScript  = redis.NewScript(renewSrc)
	finishScript = redis.NewScript(finishSrc)
)

var (
	// ErrInProgress is returned when another attempt owns the key: at once
	// with NoWait, or when ctx ends while Do waits for it.
	ErrInProgress = errors.New("idempotency: request in progress")
	// ErrFingerprintMismatch is returned when a key is reused with another
	// fingerprint than its first use.
	ErrFingerprintMismatch = errors.New("idempotency: key reused with another request")
	// ErrResultTooLarge is returned when fn's result is over the size
	// limit. fn ran, so the key is completed without a body and every retry
	// gets this error instead of running fn again.
	ErrResultTooLarge = errors.New("idempotency: result over the size limit")
	// ErrLeaseLost is the cause of fn's context when the attempt lost its
	// key (its lease ran out and another attempt claimed it); its result is
	// not stored.
	ErrLeaseLost = errors.New("idempotency: lease lost")
	// ErrInvalid is wrapped by bad-input errors; nothing is written.
	ErrInvalid = errors.New("idempotency: invalid argument")
)

// Attempt describes one run of fn.
type Attempt struct {
	// N counts the attempts at the key, from 1; 0 when fn runs without
	// the store (fail open).
	N int
	// Fence increases with every attempt at the key while its record
	// lives: guard your own write with it so that an owner presumed dead
	// cannot overwrite a successor's. It is 0 when fn runs without the
	// store, below every fence the store issues.
	Fence uint64
}

// Result is what Do returns: fn's result, run now or replayed.
type Result struct {
	Body     []byte
	Replayed bool
	// Degraded is true when fn ran without the idempotency check, or its
	// result could not be stored, because Redis could not be reached
	// (WithStoreFailure(instrument.FailOpen)).
	Degraded bool
}

// Store runs a function at most once per key (see the package doc). It is
// safe for concurrent use.
type Store struct {
	c        redis.UniversalClient
	cfg      config
	leaseMS  string
	ttlMS    string
	outcome  map[string]prometheus.Counter
	degraded *storefail.Reporter
	tracer   trace.Tracer
}

// ScopeName is the instrumentation scope of the spans a Store emits.
const ScopeName = "github.com/lockgov/lockgov/instrument/idempotency"

var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// New returns a Store on c (a single node, Sentinel or Cluster client).
func New(c redis.UniversalClient, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, errors.New("idempotency: nil client")
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
	if cfg.resultTTL <= cfg.lease {
		return nil, fmt.Errorf("idempotency: result TTL %v must be longer than the lease %v", cfg.resultTTL, cfg.lease)
	}
	if err := cfg.acks.CheckClient("idempotency", c); err != nil {
		return nil, err
	}
	vec := telemetry.IdempotencyRequestsTotal.CounterVec(nil)
	var err error
	telemetry.Register(cfg.reg, &vec, &err)
	if err != nil {
		return nil, fmt.Errorf("idempotency: register metrics: %w", err)
	}
	degraded, err := storefail.NewReporter(storefail.Idempotency, cfg.reg, cfg.logger)
	if err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	tp := cfg.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	s := &Store{
		degraded: degraded,
		tracer:   tp.Tracer(ScopeName),
		c:        c,
		cfg:      cfg,
		leaseMS:  strconv.FormatInt(cfg.lease.Milliseconds(), 10),
		ttlMS:    strconv.FormatInt(cfg.resultTTL.Milliseconds(), 10),
		outcome:  map[string]prometheus.Counter{},
	}
	for _, o := range telemetry.IdempotencyRequestsTotal.Values["outcome"] {
		s.outcome[o] = vec.WithLabelValues(o)
	}
	return s, nil
}

// Do runs fn once for key: the first call runs it and stores its result;
// later calls with the same fingerprint get that result (Replayed true)
// for the result TTL. While another attempt owns the key, Do waits until
// it ends or ctx ends (then ErrInProgress), or returns ErrInProgress at
// once with NoWait. If fn returns an error the key is released, so the
// next call runs fn again; Do returns fn's error. fn's context ends when
// ctx does or when the attempt loses the key (cause ErrLeaseLost).
//
// When Redis cannot be reached Do returns the transport error, or, with
// WithStoreFailure(instrument.FailOpen), runs fn without the check and
// returns its result with Degraded true (see the package doc). With
// WithReplicaAcks, an error holding a *NotReplicatedError says too few
// replicas have the claim (fn did not run) or the completed record
// (Result.Body holds it; a retry replays it).
func (s *Store) Do(ctx context.Context, key string, fingerprint []byte,
	fn func(ctx context.Context, a Attempt) ([]byte, error), opts ...DoOption) (Result, error) {
	var dc doConfig
	for _, o := range opts {
		if o != nil {
			o.applyDo(&dc)
		}
	}
	ctx, span := s.tracer.Start(ctx, "idempotency do", clientSpan...)
	defer span.End()
	res, outcome, err := s.do(ctx, key, fingerprint, fn, dc)
	s.outcome[outcome].Inc()
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("idempotency.outcome", outcome),
			attribute.Bool("idempotency.replayed", res.Replayed),
			attribute.String("db.system.name", "redis"),
		)
		if err != nil {
			// Do's errors name the key (%q) for the caller; the span
			// records them with the key left out (see the package doc).
			span.RecordError(telemetry.Keyless(err, key))
			span.SetStatus(codes.Error, outcome)
		}
	}
	return res, err
}

// do is Do without the span and the count: it returns the outcome label.
func (s *Store) do(ctx context.Context, key string, fingerprint []byte,
	fn func(ctx context.Context, a Attempt) ([]byte, error), dc doConfig) (Result, string, error) {
	if err := checkArgs(key, fingerprint, fn == nil); err != nil {
		return Result{}, "error", err
	}
	rec := s.cfg.prefix + "{" + key + "}"
	owner := token()
	wait := 5 * time.Millisecond
	for {
		cmd, unacked := s.run(ctx, ctx, beginScript, rec, owner, s.leaseMS, fingerprint, s.ttlMS)
		res, err := cmd.Slice()
		if err != nil {
			if s.failOpen(ctx, err) {
				return s.runDegraded(ctx, fn)
			}
			return Result{}, "error", fmt.Errorf("idempotency: begin %q: %w", key, err)
		}
		switch res[0].(string) {
		case "mismatch":
			return Result{}, "mismatch", fmt.Errorf("idempotency: key %q: %w", key, ErrFingerprintMismatch)
		case "done":
			body := []byte(res[1].(string))
			if unacked != nil {
				return Result{Body: body, Replayed: true}, "not_replicated", fmt.Errorf("idempotency: key %q: completed on the primary, not yet on enough replicas (retry to replay it): %w", key, unacked)
			}
			if res[2].(string) == "1" {
				return Result{Replayed: true}, "replay", fmt.Errorf("idempotency: key %q: %w", key, ErrResultTooLarge)
			}
			return Result{Body: body, Replayed: true}, "replay", nil
		case "run":
			if unacked != nil {
				// fn must not run on a claim that a failover to a replica
				// forgets: another attempt would run it beside this one.
				s.release(ctx, rec, owner)
				return Result{}, "not_replicated", fmt.Errorf("idempotency: key %q: claimed on the primary, not yet on enough replicas, released without running fn: %w", key, unacked)
			}
			return s.runOwned(ctx, key, rec, owner, res[1].(int64), fn)
		}
		// busy: another attempt owns the key.
		if dc.noWait {
			return Result{}, "in_progress", fmt.Errorf("idempotency: key %q: %w", key, ErrInProgress)
		}
		left := time.Duration(res[1].(int64)) * time.Millisecond
		t := time.NewTimer(min(wait, left+time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return Result{}, "in_progress", fmt.Errorf("idempotency: key %q: %w (%w)", key, ErrInProgress, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// failOpen reports whether err, from a call made under ctx, lets Do decide
// without the store (FailOpen and a transport error while ctx lives), and
// counts the decision. A caller past its deadline gets a transport error
// from its own deadline (go-redis takes the socket's from ctx): that is the
// caller giving up, not the store failing.
func (s *Store) failOpen(ctx context.Context, err error) bool {
	if storefail.Ended(ctx) != nil {
		return false
	}
	return s.storeDown(ctx, err, "store unreachable: running without the idempotency check")
}

// storeDown reports whether err is the store unreachable under FailOpen,
// and counts it, with event on ctx's span.
func (s *Store) storeDown(ctx context.Context, err error, event string) bool {
	if s.cfg.storeFailure != instrument.FailOpen || !storefail.Unavailable(err) {
		return false
	}
	s.degraded.Degraded(err)
	trace.SpanFromContext(ctx).AddEvent(event)
	return true
}

// runDegraded runs fn without the store (FailOpen): attempt 0, fence 0.
func (s *Store) runDegraded(ctx context.Context, fn func(ctx context.Context, a Attempt) ([]byte, error)) (Result, string, error) {
	body, err := fn(ctx, Attempt{})
	if err != nil {
		return Result{Degraded: true}, "degraded", err
	}
	return Result{Body: body, Degraded: true}, "degraded", nil
}

// runOwned executes fn as the owner of rec, renewing its lease meanwhile,
// and stores the result or releases the key.
func (s *Store) runOwned(ctx context.Context, key, rec, owner string, n int64,
	fn func(ctx context.Context, a Attempt) ([]byte, error)) (Result, string, error) {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(s.cfg.lease / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.lease/3)
			ok, err := renewScript.Run(rctx, s.c, []string{rec}, owner, s.leaseMS, s.ttlMS).Int()
			rcancel()
			if err == nil && ok == 0 {
				cancel(ErrLeaseLost)
				return
			}
		}
	}()
	// fn may end its goroutine instead of returning (runtime.Goexit, as
	// t.FailNow does): stop the renewal and release the key then too, or
	// the renewal would hold the key for as long as the process lives.
	exited := true
	defer func() {
		if !exited {
			return
		}
		close(stop)
		<-renewed
		s.release(ctx, rec, owner)
		s.outcome["error"].Inc()
	}()
	body, panicked, ferr := call(fctx, fn, Attempt{N: int(n), Fence: uint64(n)})
	exited = false
	close(stop)
	<-renewed
	lost := errors.Is(context.Cause(fctx), ErrLeaseLost)

	// Finish even when ctx has ended: a released key lets the next attempt
	// run now instead of after the lease.
	if ferr != nil || panicked != nil {
		s.release(ctx, rec, owner)
		if panicked != nil {
			s.outcome["error"].Inc()
			panic(panicked)
		}
		return Result{}, "error", ferr
	}
	big := "0"
	stored := body
	if len(body) > s.cfg.maxResultBytes {
		big, stored = "1", nil
	}
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.lease)
	defer wcancel()
	cmd, unacked := s.run(wctx, ctx, finishScript, rec, owner, "done", stored, big, s.ttlMS)
	ok, err := cmd.Int()
	switch {
	case err != nil && big == "0" && s.storeDown(ctx, err, "store unreachable: the result was not stored"):
		// fn's effect happened; an error would invite a retry that runs
		// it again. The key stays in progress until its lease ends. The
		// write ran under wctx, not ctx, so its error is the store's even
		// when the caller's deadline passed while fn ran.
		return Result{Body: body, Degraded: true}, "degraded", nil
	case err != nil:
		return Result{}, "error", fmt.Errorf("idempotency: store the result of %q: %w", key, err)
	case ok == 0 || lost:
		return Result{}, "error", fmt.Errorf("idempotency: key %q: %w", key, ErrLeaseLost)
	case unacked != nil:
		// fn's effect happened and its record is on the primary: a retry
		// replays it, unless a failover loses it first.
		return Result{Body: body}, "not_replicated", fmt.Errorf("idempotency: key %q: completed on the primary, not yet on enough replicas (retry to replay it): %w", key, unacked)
	case big == "1":
		return Result{}, "error", fmt.Errorf("idempotency: key %q: %d bytes, limit %d: %w", key, len(body), s.cfg.maxResultBytes, ErrResultTooLarge)
	}
	return Result{Body: body}, "first", nil
}

// release frees rec for the next attempt (fn failed, or its claim was not
// replicated), even when ctx has ended: a released key lets the next
// attempt run now instead of after the lease. It waits for no replica: a
// release a failover loses leaves the key to its lease.
func (s *Store) release(ctx context.Context, rec, owner string) {
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.lease)
	defer wcancel()
	_ = finishScript.Run(wctx, s.c, []string{rec}, owner, "free", "", "0", s.ttlMS).Err()
}

// call runs fn and returns its panic value instead of unwinding, so that
// run stops the renewal and releases the key before re-panicking.
func call(ctx context.Context, fn func(ctx context.Context, a Attempt) ([]byte, error), a Attempt) (body []byte, panicked any, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	body, err = fn(ctx, a)
	return body, nil, err
}

func checkArgs(key string, fingerprint []byte, nilFn bool) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("%w: key of %d bytes: at most %d", ErrInvalid, len(key), MaxKeyBytes)
	case len(fingerprint) > MaxFingerprintBytes:
		return fmt.Errorf("%w: fingerprint of %d bytes: at most %d (pass a hash)", ErrInvalid, len(fingerprint), MaxFingerprintBytes)
	case nilFn:
		return fmt.Errorf("%w: nil fn", ErrInvalid)
	}
	return nil
}

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
