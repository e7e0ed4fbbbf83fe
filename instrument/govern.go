package instrument

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/internal/errchain"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/internal/telemetry"
	"github.com/lockgov/lockgov/policy"
)

// Governed is a Locker with the three rules (timeout, fallback release,
// trace propagation) applied to every call, and spans and metrics around
// each. It is safe for concurrent use.
type Governed struct {
	inner   Locker
	cfg     config
	backend string
	matcher *policy.Matcher
	metrics *metrics
	tracer  trace.Tracer
	// Spans are skipped while they could not record (see spansOff): the
	// provider is noop's, or the otel global one while nothing has been
	// set through otel.SetTracerProvider (globalTP is that provider).
	noopTP   bool
	globalTP trace.TracerProvider

	auditMu   sync.Mutex
	auditLast map[string]time.Time // rule+pattern -> last audit log line

	beat *fleet.Attachment // nil: no heartbeat (see heartbeat.go)

	// FailOpen: the process-local fallback and its count and log.
	local    localLocks
	degraded *storefail.Reporter
}

// Govern wraps l with policy, spans and metrics. A configuration error (nil
// l, an invalid policy, a metrics registration conflict) is returned by
// every Acquire of the result; use NewGoverned to see it up front.
func Govern(l Locker, opts ...Option) Locker {
	g, err := NewGoverned(l, opts...)
	if err != nil {
		return LockerFunc(func(context.Context, string, ...AcquireOption) (Lease, error) { return nil, err })
	}
	return g
}

// NewGoverned is Govern with the configuration error returned.
func NewGoverned(l Locker, opts ...Option) (*Governed, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: instrument.Govern: nil Locker", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	backend := cfg.backend
	if b, ok := l.(interface{ Backend() string }); ok && backend == "" {
		backend = b.Backend()
	}
	if backend == "" {
		backend = "custom"
	}
	m, err := newMetrics(cfg.reg)
	if err != nil {
		return nil, fmt.Errorf("%w: instrument.Govern: register metrics: %w", ErrInvalidOption, err)
	}
	degraded, err := storefail.NewReporter(storefail.Lock, cfg.reg, cfg.logger)
	if err != nil {
		return nil, fmt.Errorf("%w: instrument.Govern: %w", ErrInvalidOption, err)
	}
	g := &Governed{
		inner:     l,
		cfg:       cfg,
		backend:   backend,
		matcher:   policy.NewMatcher(cfg.policy),
		metrics:   m,
		tracer:    cfg.tp.Tracer(ScopeName),
		auditLast: make(map[string]time.Time),
		degraded:  degraded,
	}
	switch cfg.tp.(type) {
	case noop.TracerProvider, *noop.TracerProvider:
		g.noopTP = true
	default:
		if isUnsetGlobal(cfg.tp) {
			g.globalTP = cfg.tp
		}
	}
	if err := g.attachFleet(l); err != nil {
		return nil, err
	}
	return g, nil
}

// isUnsetGlobal reports whether tp is the otel global provider as it is
// before otel.SetTracerProvider: its tracers start non-recording spans
// until a provider is set, and then delegate to it. Its type is internal to
// otel, so it is recognised by name.
func isUnsetGlobal(tp trace.TracerProvider) bool {
	t := reflect.TypeOf(tp)
	return t != nil && t.Kind() == reflect.Pointer &&
		t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global" && t.Elem().Name() == "tracerProvider" &&
		otel.GetTracerProvider() == tp
}

// spansOff reports whether a span started now with ctx would record
// nothing, so that Govern skips starting it (as go-redis's redisotel skips
// its span work): the provider is a no-op, and the caller's span is not
// recording either (a recording one may come from auto-instrumentation,
// which the global provider then follows). A skipped span changes nothing
// the caller can see: a no-op span carries the caller's span context, which
// is what the trace id and the propagators then read from ctx directly.
func (g *Governed) spansOff(ctx context.Context) bool {
	if !g.noopTP && (g.globalTP == nil || otel.GetTracerProvider() != g.globalTP) {
		return false
	}
	return !trace.SpanFromContext(ctx).IsRecording()
}

// Backend returns the backend label of the governed Locker.
func (g *Governed) Backend() string { return g.backend }

// Acquire applies the policy for key's pattern, then acquires through the
// governed Locker inside an "acquire lock" span. A key already held by a
// lease of this Governed carried in ctx is re-entered: the hold count goes
// up and the matching Release counts it down; while another re-entrant hold
// opened through the same hold is open, the call waits for it (see the
// package doc on re-entrancy).
func (g *Governed) Acquire(ctx context.Context, key string, opts ...AcquireOption) (Lease, error) {
	start := time.Now()
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	label, rule := g.matcher.Match(key)
	pm := g.metrics.forPattern(g.backend, label)

	if n := heldBy(ctx, g, key); n != nil {
		r, err := n.lease.reenter(ctx, n.at, reentryFailsFast(rule, opts))
		if err != nil {
			pm.notAcquired.Inc()
			return nil, err
		}
		if r != nil {
			pm.reentered.Inc()
			return r, nil
		}
	}

	// One allocation for the observer, the configuration the backend gets,
	// the option that hands it over and the propagators' carrier.
	obs := &leaseObserver{g: g, pm: pm, parent: trace.SpanFromContext(ctx), key: key}
	if err := g.resolve(ctx, rule, label, opts, &obs.cfg); err != nil {
		pm.refused.Inc()
		return nil, err
	}
	var span trace.Span
	recording := false
	if !g.spansOff(ctx) {
		ctx, span = g.tracer.Start(ctx, "acquire lock", clientSpan...)
		recording = span.IsRecording()
	}
	sc := trace.SpanContextFromContext(ctx)
	if sc.IsValid() {
		obs.cfg.TraceID = sc.TraceID().String()
		if sc.IsSampled() {
			obs.exemplar = obs.cfg.TraceID
		}
		g.cfg.props.Inject(ctx, &obs.carrier)
		if len(obs.carrier.m) > 0 {
			meta := make(map[string]string, len(obs.cfg.Meta)+len(obs.carrier.m))
			for k, v := range obs.cfg.Meta {
				meta[k] = v
			}
			for k, v := range obs.carrier.m {
				meta[k] = v
			}
			obs.cfg.Meta = meta
		}
	}
	obs.cfg.Observer = obs
	g.beforeWait(ctx, obs)
	obs.opt[0] = (*resolvedConfig)(&obs.cfg)

	inner, err := g.inner.Acquire(ctx, key, obs.opt[:]...)
	degraded := false
	if err != nil && g.cfg.storeFailure == FailOpen && storefail.Ended(ctx) == nil && storefail.Unavailable(err) {
		// The store is unreachable: a process-local lock on the key, with
		// the same wait strategy and observer, stands in for it.
		storeErr := err
		degraded = true
		// Its wait and hold are this process's alone: the heartbeat says
		// so, or the agent draws wait-for edges to other processes'
		// fallback locks on the key (see fleet.HeldLock.Fallback).
		obs.fallback = true
		if recording {
			span.AddEvent("store unreachable: process-local lock", trace.WithAttributes(attribute.String("error", err.Error())))
		}
		inner, err = g.local.Acquire(ctx, key, obs.opt[:]...)
		// Counted once the process-local lock has decided: a grant or its
		// refusal. A caller whose own context ended first (waiting on the
		// process-local lock, or in the gap before it) gave up, as on the
		// store, and decided nothing.
		if err == nil || storefail.Ended(ctx) == nil {
			g.degraded.Degraded(storeErr)
		}
	}
	// One wall clock read per acquire: durations need only the monotonic
	// clock, which time.Since reads alone.
	dur := time.Since(start)
	if recording && err != nil {
		// One SetAttributes per span, at the end: the SDK then grows its
		// attribute slice once.
		span.SetAttributes(
			attribute.String("lock.key_pattern", label),
			attribute.String("lock.backend", g.backend),
			attribute.String("lock.wait_strategy", obs.cfg.Wait.String()),
			attribute.String("db.system.name", g.backend),
			attribute.Int("lock.attempts", obs.attempts),
		)
	}
	if err != nil {
		if errchain.Is(err, ErrNotAcquired) {
			pm.notAcquired.Inc()
			pm.durNotAcquired.Observe(dur, obs.exemplar)
		} else {
			pm.failed.Inc()
			pm.durFailed.Observe(dur, obs.exemplar)
		}
		if span != nil {
			span.RecordError(telemetry.Keyless(err, key))
			span.SetStatus(codes.Error, "lock not acquired")
			span.End()
		}
		return nil, err
	}
	pm.acquired.Inc()
	pm.durAcquired.Observe(dur, obs.exemplar)
	pm.held.Inc()
	obs.acquiredAt = start.Add(dur)
	g.trackHeld(obs, inner.Fence())
	if span != nil {
		if recording {
			span.SetAttributes(
				attribute.String("lock.key_pattern", label),
				attribute.String("lock.backend", g.backend),
				attribute.String("lock.wait_strategy", obs.cfg.Wait.String()),
				attribute.String("db.system.name", g.backend),
				attribute.Int("lock.attempts", obs.attempts),
				attribute.Int64("lock.fence", int64(inner.Fence())),
				attribute.Bool("lock.degraded", degraded),
			)
			obs.deferSpanEnd(span)
		} else {
			span.End()
		}
	}

	gl := &governedLease{inner: inner, g: g, obs: obs, label: label, holds: 1}
	if !degraded && g.cfg.storeFailure == FailOpen {
		// A store lease excludes this process's fallback Acquires of the
		// key as a process-local one does, until it ends: released, lost,
		// expired or released as leaked (its Context ends in each case);
		// granted beside a process-local lease, from that one's release on.
		free := g.local.occupy(key)
		stop := context.AfterFunc(inner.Context(), free)
		gl.unslot = func() { stop(); free() }
	}
	gl.self = heldNode{owner: g, key: key, lease: gl, at: &gl.top, next: heldChain(ctx)}
	gl.ctx = leaseContext{inner: inner, node: &gl.self}
	return gl, nil
}

// resolvedConfig hands a configuration Govern resolved to the backend, as
// WithConfig does, without allocating: it lives in the lease observer.
type resolvedConfig AcquireConfig

func (r *resolvedConfig) apply(c *AcquireConfig) { *c = AcquireConfig(*r) }

// lazyCarrier is a propagation.MapCarrier made on the first Set, so that a
// propagator that writes nothing costs no map.
type lazyCarrier struct{ m propagation.MapCarrier }

func (c *lazyCarrier) Get(k string) string { return c.m.Get(k) }
func (c *lazyCarrier) Keys() []string      { return c.m.Keys() }
func (c *lazyCarrier) Set(k, v string) {
	if c.m == nil {
		c.m = make(propagation.MapCarrier, 2)
	}
	c.m[k] = v
}

// reentryFailsFast reports whether a re-entrant Acquire gives up at once
// when another re-entrant hold is open, as the wait strategy says; any other
// strategy waits until ctx ends.
func reentryFailsFast(rule *policy.Rule, opts []AcquireOption) bool {
	var cfg AcquireConfig
	if rule.Wait.Strategy == policy.WaitFailFast {
		cfg.Wait = WaitFailFast
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	return cfg.Wait == WaitFailFast
}

// resolve builds the acquire configuration into cfg from the rule and the
// caller's options and judges it against the rule.
func (g *Governed) resolve(ctx context.Context, rule *policy.Rule, label string, opts []AcquireOption, cfg *AcquireConfig) error {
	*cfg = AcquireConfig{
		TTL:          rule.TTL,
		PollInterval: rule.Wait.PollInterval,
		MaxHold:      rule.MaxHold,
	}
	cfg.Wait = rule.Wait.Strategy
	if cfg.Wait == WaitRetry {
		cfg.MaxAttempts = rule.Wait.Attempts
		if rule.Wait.Backoff == policy.BackoffConstant {
			cfg.Backoff = ConstantBackoff(rule.Wait.Min)
		} else {
			cfg.Backoff = ExponentialBackoff(rule.Wait.Min, rule.Wait.Max)
		}
	}
	for _, o := range opts {
		if o != nil {
			o.apply(cfg)
		}
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if err := cfg.Validate(); err != nil {
		return err
	}

	if _, ok := ctx.Deadline(); !ok {
		if err := g.violate(rule, label, "timeout", "ctx has no deadline: use context.WithTimeout"); err != nil {
			return err
		}
	}
	if cfg.TTL > rule.MaxTTL || cfg.TTL < rule.MinTTL {
		msg := fmt.Sprintf("TTL %v is outside the policy bounds [%v, %v]", cfg.TTL, rule.MinTTL, rule.MaxTTL)
		if err := g.violate(rule, label, "ttl", msg); err != nil {
			return err
		}
	}
	if rule.MaxHold > 0 && cfg.MaxHold > rule.MaxHold {
		msg := fmt.Sprintf("max hold %v is above the policy's %v", cfg.MaxHold, rule.MaxHold)
		if err := g.violate(rule, label, "max_hold", msg); err != nil {
			return err
		}
	}
	if g.cfg.skew != nil {
		if off, ok := g.cfg.skew(); ok {
			switch g.cfg.policy.Skew.Tier(off) {
			case policy.TierReject:
				g.metrics.violations.WithLabelValues("clock_skew", policy.ModeEnforce.String(), label).Inc()
				return fmt.Errorf("instrument: acquire (pattern %s): %w: offset %v is above %v",
					label, ErrClockSkew, off, g.cfg.policy.Skew.Reject)
			case policy.TierDegrade:
				cfg.TTL = degradeTTL(g.cfg.policy.Skew, rule, cfg.TTL)
			}
		}
	}
	return nil
}

// minBackendTTL is the shortest TTL AcquireConfig.Validate accepts.
const minBackendTTL = 3 * time.Millisecond

// degradeTTL is the TTL of a new lease in the skew degrade tier: ttl scaled
// by the tier's factor, but not below the rule's MinTTL (a lease shorter than
// the policy allows is the risk the policy exists to prevent) nor below what
// a backend accepts, and never above ttl itself (a TTL already below MinTTL,
// let through by audit mode, is left as it is).
func degradeTTL(s policy.SkewTiers, rule *policy.Rule, ttl time.Duration) time.Duration {
	floor := min(ttl, max(rule.MinTTL, minBackendTTL))
	return max(s.DegradeTTL(ttl), floor)
}

// violate counts a broken rule and, in enforce mode, returns the refusal.
// Audit mode logs at most once a minute per rule and pattern.
func (g *Governed) violate(rule *policy.Rule, label, name, msg string) error {
	if rule.Mode == policy.ModeOff {
		return nil
	}
	g.metrics.violations.WithLabelValues(name, rule.Mode.String(), label).Inc()
	if rule.Mode == policy.ModeEnforce {
		return fmt.Errorf("instrument: acquire (pattern %s): %w: %s rule: %s", label, ErrPolicy, name, msg)
	}
	k := name + "\x00" + label
	now := time.Now()
	g.auditMu.Lock()
	last, seen := g.auditLast[k]
	if !seen || now.Sub(last) >= time.Minute {
		g.auditLast[k] = now
		seen = false
	}
	g.auditMu.Unlock()
	if !seen {
		g.cfg.logger.Warn("lockgov: policy violation (audit mode)", "rule", name, "lock_pattern", label, "backend", g.backend, "problem", msg)
	}
	return nil
}

// leaseObserver turns backend hooks into metrics, log lines and events on
// the caller's span. It never references the lease handle, so a dropped
// handle can be garbage-collected: that is why it is an allocation of its
// own and not part of governedLease (the backend's lease keeps its observer
// reachable, and the handle references the backend's lease).
type leaseObserver struct {
	g          *Governed
	pm         *patternMetrics
	parent     trace.Span
	exemplar   string
	acquiredAt time.Time
	attempts   int // written only by the acquiring goroutine, during Acquire
	ended      atomic.Bool
	key        string
	holds      []string // keys the acquiring context already holds, for the heartbeat
	// fallback: the lease or wait is the process-local lock of FailOpen
	// (set by the acquiring goroutine before it waits on that lock).
	fallback bool

	// The acquire span of a lease, recording and not ended yet (see
	// deferSpanEnd), and spanState: spanNone, spanKept (span and spanEnd
	// are written) or spanEnded.
	span      trace.Span
	spanEnd   [1]trace.SpanEndOption
	spanState atomic.Int32

	// What the acquire hands the backend, kept here to save allocations.
	cfg     AcquireConfig
	opt     [1]AcquireOption
	carrier lazyCarrier
}

// clientSpan is the start option of every span Govern starts, in a slice
// so that passing it does not allocate one.
var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

func (o *leaseObserver) Attempt(bool) { o.attempts++ }

func (o *leaseObserver) Waiting(w bool) {
	o.g.trackWaiting(o, w)
	if w {
		o.pm.waiters.Inc()
	} else {
		o.pm.waiters.Dec()
	}
}

// deferSpanEnd keeps the acquire span of a lease open, stamped to end at
// acquiredAt, until the lease ends or is first renewed, whichever comes
// first (endSpan).
//
// Why: a span processor that batches (the SDK's BatchSpanProcessor, the
// usual one) hands every ended span to a goroutine of its own, and a span
// that ends while that goroutine sleeps wakes it: a thread wake-up, which
// costs more than the rest of the span on a machine with idle cores
// (docs/BENCHMARKS.md). The acquire span ending right next to the release
// span wakes it once per lease instead of twice. The span's timestamps,
// attributes and place in the trace are the same; only its export waits,
// for at most the first renewal (a third of the TTL with the watchdog on),
// so that a lock held for hours still shows its acquire within seconds.
//
// The backend's lease runs before Acquire returns: a renewal, a loss or a
// leak may come first. Neither misses the span: end sets ended before it
// calls endSpan, and deferSpanEnd looks at ended after keeping the span.
func (o *leaseObserver) deferSpanEnd(span trace.Span) {
	o.span = span
	o.spanEnd[0] = trace.WithTimestamp(o.acquiredAt)
	o.spanState.Store(spanKept)
	if o.ended.Load() {
		o.endSpan()
	}
}

const (
	spanNone int32 = iota
	spanKept
	spanEnded
)

// endSpan ends the acquire span deferSpanEnd kept open, once; before
// deferSpanEnd, it does nothing.
func (o *leaseObserver) endSpan() {
	if o.spanState.CompareAndSwap(spanKept, spanEnded) {
		o.span.End(o.spanEnd[:]...)
	}
}

func (o *leaseObserver) Renewed(err error) {
	o.endSpan()
	switch {
	case err == nil:
		o.pm.renewOK.Inc()
		if o.parent.IsRecording() {
			o.parent.AddEvent("lock renewed")
		}
	case errchain.Is(err, ErrNotHeld):
		o.pm.renewLost.Inc()
		if !o.parent.IsRecording() {
			return
		}
		o.parent.AddEvent("lock renewal refused", trace.WithAttributes(attribute.String("error", err.Error())))
	default:
		o.pm.renewError.Inc()
		if !o.parent.IsRecording() {
			return
		}
		o.parent.AddEvent("lock renewal failed", trace.WithAttributes(attribute.String("error", err.Error())))
	}
}

func (o *leaseObserver) Lost(cause error) {
	o.pm.lost.Inc()
	if o.parent.IsRecording() {
		o.parent.AddEvent("lock lost", trace.WithAttributes(attribute.String("error", cause.Error())))
	}
	o.end()
}

func (o *leaseObserver) Leaked() {
	o.pm.leaked.Inc()
	o.g.cfg.logger.Error("lockgov: lease garbage-collected while held; releasing it (call Release, or use instrument.Do)",
		"lock_pattern", o.pm.pattern, "backend", o.pm.backend, "held_for", time.Since(o.acquiredAt))
	o.end()
}

// end records the hold once, whichever of release, loss or leak comes first.
func (o *leaseObserver) end() {
	if o.ended.CompareAndSwap(false, true) {
		o.g.untrackHeld(o)
		o.pm.held.Dec()
		o.pm.hold.Observe(time.Since(o.acquiredAt), o.exemplar)
	}
	o.endSpan()
}
