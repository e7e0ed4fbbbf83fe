package quota_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgov/lockgov/instrument/quota"
)

// TestDeductRefund_SpansCarryThePatternNotTheKey: Deduct and Refund are
// client spans under the caller's span with the key pattern and result;
// ErrInsufficient is an answer, not an error status.
func TestDeductRefund_SpansCarryThePatternNotTheKey(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	q := newQuota(t, single(t), quota.WithTracerProvider(tp), quota.WithPolicy(skuPolicy(t)))
	ctx, parent := tp.Tracer("test").Start(timeout(t, time.Minute), "checkout")
	const key = "stock:sku-secret-9"
	if err := q.Set(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Deduct(ctx, key, 1, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Deduct(ctx, key, 1, "r2"); !errors.Is(err, quota.ErrInsufficient) {
		t.Fatal(err)
	}
	if _, err := q.Refund(ctx, key, 1, "r3"); err != nil {
		t.Fatal(err)
	}
	parent.End()
	var names, results []string
	for _, sp := range rec.Ended() {
		if sp.Name() == "checkout" {
			continue
		}
		names = append(names, sp.Name())
		if sp.Parent().SpanID() != parent.SpanContext().SpanID() || sp.SpanKind() != trace.SpanKindClient || sp.Status().Code == codes.Error {
			t.Fatalf("span %s: parent %v kind %v status %v", sp.Name(), sp.Parent().SpanID(), sp.SpanKind(), sp.Status())
		}
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range sp.Attributes() {
			if kv.Value.Type() == attribute.STRING && kv.Value.AsString() == key {
				t.Fatalf("span %s attribute %s carries the raw key", sp.Name(), kv.Key)
			}
			attrs[kv.Key] = kv.Value
		}
		if p := attrs["quota.key_pattern"].AsString(); p != "stock:{sku}" {
			t.Fatalf("span %s key pattern %q, want stock:{sku}", sp.Name(), p)
		}
		if r, ok := attrs["quota.result"]; ok {
			results = append(results, r.AsString())
		}
	}
	if len(names) != 3 || names[0] != "quota deduct" || names[2] != "quota refund" ||
		len(results) != 2 || results[0] != "ok" || results[1] != "insufficient" {
		t.Fatalf("spans %v results %v; want two deducts (ok, insufficient) and a refund", names, results)
	}
}

// TestDeduct_AnErrorSpanLeavesTheKeyOut: an error's span event says what
// failed without the key, which the error itself names for the caller
// (span.RecordError used to copy it into exception.message).
func TestDeduct_AnErrorSpanLeavesTheKeyOut(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	q := newQuota(t, single(t), quota.WithTracerProvider(tp), quota.WithPolicy(skuPolicy(t)))
	ctx := timeout(t, time.Minute)
	const key = "stock:sku-secret-9"
	if err := q.Set(ctx, key, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Deduct(ctx, key, 1, "r1"); err != nil {
		t.Fatal(err)
	}
	_, err := q.Deduct(ctx, key, 2, "r1")
	if !errors.Is(err, quota.ErrRequestIDReused) || !strings.Contains(err.Error(), key) {
		t.Fatalf("the same id with another amount: %v; want ErrRequestIDReused naming the key", err)
	}
	var message string
	for _, sp := range rec.Ended() {
		for _, ev := range sp.Events() {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.Emit(), key) {
					t.Fatalf("span %s event %q attribute %s carries the key: %q", sp.Name(), ev.Name, kv.Key, kv.Value.Emit())
				}
				if kv.Key == "exception.message" {
					message = kv.Value.AsString()
				}
			}
		}
	}
	if !strings.Contains(message, "<key>") {
		t.Fatalf("exception.message %q, want the error with the key left out", message)
	}
}
