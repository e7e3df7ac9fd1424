package otelleasebus_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/benbjohnson/clock"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/otelleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// A subscription's statistics as metrics, read at each collection: here
// by a manual reader, on a mock clock.
func ExampleObserveSubscription() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	mock := clock.NewMock()
	b, _ := broker.New[string](broker.WithClock(mock))
	defer b.Close()
	_ = b.CreateTopic("orders")
	sub, _ := b.Subscribe("orders", "billing")

	reg, err := otelleasebus.ObserveSubscription(sub, otelleasebus.WithMeterProvider(mp))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Unregister()

	for _, o := range []string{"o-1", "o-2", "o-3"} {
		_, _ = b.Publish(ctx, "orders", o)
	}
	d := sub.TryPoll(1)[0]
	_ = sub.Ack(d.LeaseID)
	_ = sub.TryPoll(1) // leased, not settled
	mock.Add(10 * time.Second)

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	var lines []string // data points come in no particular order: sort them
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range data.DataPoints {
				if state, ok := p.Attributes.Value("leasebus.message.state"); ok {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, state.AsString(), p.Value))
				} else if r, ok := p.Attributes.Value("leasebus.dead_letter.reason"); ok {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, r.AsString(), p.Value))
				} else {
					lines = append(lines, fmt.Sprintf("%s %d", m.Name, p.Value))
				}
			}
		case metricdata.Gauge[float64]:
			lines = append(lines, fmt.Sprintf("%s %v%s", m.Name, data.DataPoints[0].Value, m.Unit))
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// leasebus.subscription.acked 1
	// leasebus.subscription.dead_lettered{cancelled} 0
	// leasebus.subscription.dead_lettered{expired} 0
	// leasebus.subscription.dead_lettered{max-attempts} 0
	// leasebus.subscription.dead_lettered{overflow} 0
	// leasebus.subscription.dead_lettered{rejected} 0
	// leasebus.subscription.delivered 2
	// leasebus.subscription.dropped 0
	// leasebus.subscription.limited 0
	// leasebus.subscription.messages{delayed} 0
	// leasebus.subscription.messages{held_back} 0
	// leasebus.subscription.messages{in_flight} 1
	// leasebus.subscription.messages{visible} 1
	// leasebus.subscription.oldest_visible.age 10s
	// leasebus.subscription.published 3
	// leasebus.subscription.redelivered 0
	// leasebus.subscription.redriven 0
	// leasebus.subscription.rejected 0
}

// A publish and the processing of its message, traced: the process span
// links to the publish span (or is its child, with
// WithPublisherAsParent), and ends with the poller's outcome.
func ExampleNewMiddleware() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(ctx)

	b, _ := broker.New[string]()
	defer b.Close()
	_ = b.CreateTopic("orders")
	sub, _ := b.Subscribe("orders", "billing")

	pub, _ := otelleasebus.NewPublisher(b, otelleasebus.WithTracerProvider(tp))
	if _, err := pub.Publish(ctx, "orders", "o-1"); err != nil {
		fmt.Println(err)
		return
	}

	mw, _ := otelleasebus.NewMiddleware(sub, otelleasebus.WithTracerProvider(tp))
	handle := func(ctx context.Context, d queue.Delivery[string]) error {
		return nil // ctx holds the process span
	}
	p, _ := poller.New(sub, mw.Handler(handle), mw.Observer())
	if err := p.RunUntilIdle(ctx); err != nil {
		fmt.Println(err)
		return
	}

	ended := spans.Ended()
	publish, process := ended[0], ended[1]
	for _, s := range ended {
		fmt.Println(s.Name(), s.SpanKind())
	}
	fmt.Println("linked to the publish span:", process.Links()[0].SpanContext.SpanID() == publish.SpanContext().SpanID())
	for _, kv := range process.Attributes() {
		if slices.Contains([]attribute.Key{"leasebus.outcome", "leasebus.message.delivery_attempt", "messaging.consumer.group.name"}, kv.Key) {
			fmt.Printf("%s=%s\n", kv.Key, kv.Value.String())
		}
	}
	// Output:
	// publish orders producer
	// process orders consumer
	// linked to the publish span: true
	// messaging.consumer.group.name=billing
	// leasebus.message.delivery_attempt=1
	// leasebus.outcome=acked
}

// A Publisher puts the span's context in the message's headers, beside the
// caller's own.
func ExamplePublisher_PublishWithHeaders() {
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(ctx)

	b, _ := broker.New[string]()
	defer b.Close()
	_ = b.CreateTopic("orders")
	_, _ = b.Subscribe("orders", "billing")

	pub, _ := otelleasebus.NewPublisher(b, otelleasebus.WithTracerProvider(tp))
	msg, err := pub.PublishWithHeaders(ctx, "orders", "o-1", map[string]string{"tenant": "acme"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for k := range msg.Headers.All() {
		fmt.Println(k)
	}
	// Output:
	// tenant
	// traceparent
}
