package otelleasebus_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/otelleasebus"
	"github.com/leasebus/leasebus/queue"
)

// spanNamed returns the one ended span called name, failing the test if
// there is not exactly one.
func spanNamed(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d ended spans named %q, want 1", len(found), name)
	}
	return found[0]
}

// traceparent is the W3C traceparent of a sampled span context.
func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

// A Publish is a producer span, child of the caller's, whose context the
// message carries; it is counted and timed on the broker's clock.
func TestPublishSpanAndHeaders(t *testing.T) {
	tel := newTelemetry(t)
	b, _ := brokertest.New[string](t)
	brokertest.Subscribe(t, b, "orders", "billing")
	pub, err := otelleasebus.NewPublisher(b, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "request")
	msg, err := pub.Publish(ctx, "orders", "o-1", broker.WithPriority(queue.PriorityHigh))
	if err != nil {
		t.Fatal(err)
	}
	parent.End()

	s := spanNamed(t, tel.spans.Ended(), "publish orders")
	if s.SpanKind() != trace.SpanKindProducer {
		t.Errorf("kind %v, want producer", s.SpanKind())
	}
	if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("the publish span is not a child of the caller's")
	}
	if !s.StartTime().Equal(brokertest.Epoch) || !s.EndTime().Equal(brokertest.Epoch) {
		t.Errorf("span from %v to %v, want both at the mock clock's %v", s.StartTime(), s.EndTime(), brokertest.Epoch)
	}
	equalAttrs(t, "publish span", s.Attributes(), map[string]string{
		"messaging.system":           "leasebus",
		"messaging.operation.name":   "publish",
		"messaging.operation.type":   "send",
		"messaging.destination.name": "orders",
		"messaging.message.id":       msg.ID.String(),
	})
	if s.Status().Code != codes.Unset {
		t.Errorf("status %v, want unset", s.Status())
	}
	if got, want := msg.Headers.Get("traceparent"), traceparent(s.SpanContext()); got != want {
		t.Errorf("traceparent header %q, want %q", got, want)
	}
	if msg.Priority != queue.PriorityHigh {
		t.Errorf("the caller's options were not applied: priority %v", msg.Priority)
	}

	pubAttrs := "messaging.destination.name=orders,messaging.operation.name=publish,messaging.operation.type=send,messaging.system=leasebus"
	equalPoints(t, tel.collect(t), map[string]string{
		"messaging.client.sent.messages{" + pubAttrs + "}":      "1",
		"messaging.client.operation.duration{" + pubAttrs + "}": "count=1 sum=0", // no mock time passed
	})
}

// A failed publish records its error on the span and in the metrics.
func TestPublishError(t *testing.T) {
	tel := newTelemetry(t)
	b, _ := brokertest.New[string](t)
	pub, err := otelleasebus.NewPublisher(b, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(context.Background(), "nowhere", "x"); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Fatalf("Publish to a missing topic: %v, want ErrTopicNotFound", err)
	}
	s := spanNamed(t, tel.spans.Ended(), "publish nowhere")
	if s.Status().Code != codes.Error {
		t.Errorf("status %v, want error", s.Status())
	}
	if got := attrs(s.Attributes())["error.type"]; got != "topic_not_found" {
		t.Errorf("error.type %q, want topic_not_found", got)
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Errorf("events %v, want the recorded error", s.Events())
	}
	a := "error.type=topic_not_found,messaging.destination.name=nowhere,messaging.operation.name=publish,messaging.operation.type=send,messaging.system=leasebus"
	equalPoints(t, tel.collect(t), map[string]string{
		"messaging.client.sent.messages{" + a + "}":      "1",
		"messaging.client.operation.duration{" + a + "}": "count=1 sum=0",
	})
}

// The caller's own headers go with the trace context; a creation context
// of the caller's is kept and linked to; a broker.WithHeaders in the
// options adds its headers to the trace context (several WithHeaders add
// up), and one that names the trace keys replaces them, which the span
// says.
func TestPublishWithHeaders(t *testing.T) {
	tel := newTelemetry(t)
	b, _ := brokertest.New[string](t)
	brokertest.Subscribe(t, b, "t", "s")
	pub, err := otelleasebus.NewPublisher(b, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	user := map[string]string{"tenant": "acme"}
	msg, err := pub.PublishWithHeaders(ctx, "t", "a", user)
	if err != nil {
		t.Fatal(err)
	}
	s := tel.spans.Ended()[0]
	if msg.Headers.Get("tenant") != "acme" || msg.Headers.Get("traceparent") != traceparent(s.SpanContext()) || msg.Headers.Len() != 2 {
		t.Errorf("headers %v, want tenant and the span's traceparent", msg.Headers)
	}
	if len(user) != 1 {
		t.Errorf("the caller's map was changed: %v", user)
	}

	// A creation context of the caller's: kept as it is, and linked to.
	tel.spans.Reset()
	_, creator := tel.tp.Tracer("test").Start(ctx, "create")
	custom := map[string]string{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpan(ctx, creator), propagation.MapCarrier(custom))
	msg, err = pub.PublishWithHeaders(ctx, "t", "b", custom)
	if err != nil {
		t.Fatal(err)
	}
	s = spanNamed(t, tel.spans.Ended(), "publish t")
	if msg.Headers.Get("traceparent") != custom["traceparent"] {
		t.Errorf("the caller's creation context was replaced: %q, want %q", msg.Headers.Get("traceparent"), custom["traceparent"])
	}
	if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != creator.SpanContext().SpanID() {
		t.Errorf("links %v, want one to the caller's creation context", s.Links())
	}

	// broker.WithHeaders in the options: added to the trace context.
	tel.spans.Reset()
	msg, err = pub.Publish(ctx, "t", "c", broker.WithHeaders(map[string]string{"k": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	s = spanNamed(t, tel.spans.Ended(), "publish t")
	if msg.Headers.Get("k") != "v" || msg.Headers.Get("traceparent") != traceparent(s.SpanContext()) || msg.Headers.Len() != 2 {
		t.Errorf("headers %v, want the caller's and the span's traceparent", msg.Headers)
	}
	if len(s.Events()) != 0 {
		t.Errorf("events %v, want none", s.Events())
	}

	// One that names the trace key replaces it, and the span says so.
	tel.spans.Reset()
	msg, err = pub.Publish(ctx, "t", "d", broker.WithHeaders(map[string]string{"traceparent": "stale"}))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Headers.Get("traceparent") != "stale" {
		t.Errorf("traceparent %q, want the caller's", msg.Headers.Get("traceparent"))
	}
	s = spanNamed(t, tel.spans.Ended(), "publish t")
	if len(s.Events()) != 1 || s.Events()[0].Name != "trace context not propagated" {
		t.Errorf("events %v, want \"trace context not propagated\"", s.Events())
	}
}

// A batch is one span with the batch size; every message carries its
// context.
func TestPublishBatch(t *testing.T) {
	tel := newTelemetry(t)
	b, _ := brokertest.New[string](t)
	brokertest.Subscribe(t, b, "t", "s")
	pub, err := otelleasebus.NewPublisher(b, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := pub.PublishBatchWithHeaders(context.Background(), "t", []string{"a", "b", "c"}, map[string]string{"job": "7"})
	if err != nil {
		t.Fatal(err)
	}
	s := spanNamed(t, tel.spans.Ended(), "publish t")
	equalAttrs(t, "batch span", s.Attributes(), map[string]string{
		"messaging.system":              "leasebus",
		"messaging.operation.name":      "publish",
		"messaging.operation.type":      "send",
		"messaging.destination.name":    "t",
		"messaging.batch.message_count": "3",
	})
	for i, m := range msgs {
		if m.Headers.Get("traceparent") != traceparent(s.SpanContext()) || m.Headers.Get("job") != "7" {
			t.Errorf("message %d: headers %v", i, m.Headers)
		}
	}
	a := "messaging.destination.name=t,messaging.operation.name=publish,messaging.operation.type=send,messaging.system=leasebus"
	equalPoints(t, tel.collect(t), map[string]string{
		"messaging.client.sent.messages{" + a + "}":      "3",
		"messaging.client.operation.duration{" + a + "}": "count=1 sum=0",
	})

	// PublishBatch without headers of the caller's.
	tel.spans.Reset()
	msgs, err = pub.PublishBatch(context.Background(), "t", []string{"d"})
	if err != nil {
		t.Fatal(err)
	}
	if s := spanNamed(t, tel.spans.Ended(), "publish t"); msgs[0].Headers.Get("traceparent") != traceparent(s.SpanContext()) {
		t.Errorf("headers %v, want the span's traceparent", msgs[0].Headers)
	}
}

// With the default (noop) providers a publish injects nothing when the
// caller has no trace context, and the message has no headers.
func TestPublishNoop(t *testing.T) {
	b, _ := brokertest.New[string](t)
	brokertest.Subscribe(t, b, "t", "s")
	pub, err := otelleasebus.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := pub.Publish(context.Background(), "t", "x")
	if err != nil {
		t.Fatal(err)
	}
	if msg.Headers.Len() != 0 {
		t.Errorf("headers %v, want none", msg.Headers)
	}
	var nilCtx context.Context // a nil ctx on purpose: the broker's error, no panic
	if _, err := pub.Publish(nilCtx, "t", "x"); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("Publish(nil ctx): %v, want the broker's invalid argument", err)
	}
}
