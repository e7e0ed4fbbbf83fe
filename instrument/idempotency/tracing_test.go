package idempotency_test

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

	"github.com/lockgov/lockgov/instrument/idempotency"
)

// TestDo_SpansAreChildrenOfTheCallerWithTheOutcome: every Do is one client
// span "idempotency do" under the caller's span, carrying its outcome and
// no key; a mismatch is an error span.
func TestDo_SpansAreChildrenOfTheCallerWithTheOutcome(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	s := newStore(t, single(t), idempotency.WithTracerProvider(tp))
	ctx, parent := tp.Tracer("test").Start(timeout(t, time.Minute), "handler")
	ok := func(context.Context, idempotency.Attempt) ([]byte, error) { return []byte("r"), nil }
	for _, fp := range []string{"a", "a", "b"} {
		_, err := s.Do(ctx, "order-secret-7", []byte(fp), ok)
		if fp == "b" && !errors.Is(err, idempotency.ErrFingerprintMismatch) {
			t.Fatalf("fingerprint b: %v", err)
		}
	}
	parent.End()
	var got []string
	for _, sp := range rec.Ended() {
		if sp.Name() != "idempotency do" {
			continue
		}
		if sp.Parent().SpanID() != parent.SpanContext().SpanID() || sp.SpanKind() != trace.SpanKindClient {
			t.Fatalf("span %s: parent %v kind %v; want the caller's span, client", sp.Name(), sp.Parent().SpanID(), sp.SpanKind())
		}
		for _, kv := range sp.Attributes() {
			if kv.Value.Type() == attribute.STRING && kv.Value.AsString() == "order-secret-7" {
				t.Fatalf("span attribute %s carries the key", kv.Key)
			}
			if kv.Key == "idempotency.outcome" {
				got = append(got, kv.Value.AsString())
			}
		}
		if wantErr := len(got) == 3; (sp.Status().Code == codes.Error) != wantErr {
			t.Fatalf("span %d status %v", len(got), sp.Status())
		}
		// The error event says what failed, without the key: errors
		// name it for the caller, and RecordError used to copy it into
		// exception.message.
		var message string
		for _, ev := range sp.Events() {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.Emit(), "order-secret-7") {
					t.Fatalf("span event %q attribute %s carries the key: %q", ev.Name, kv.Key, kv.Value.Emit())
				}
				if kv.Key == "exception.message" {
					message = kv.Value.AsString()
				}
			}
		}
		if len(got) == 3 && !strings.Contains(message, "key reused") {
			t.Fatalf("mismatch span: exception.message %q, want the error without the key", message)
		}
	}
	if len(got) != 3 || got[0] != "first" || got[1] != "replay" || got[2] != "mismatch" {
		t.Fatalf("outcomes %v, want [first replay mismatch]", got)
	}
}
