package otelleasebus_test

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/otelleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// providers are the three settings the benchmarks compare: no
// instrumentation, the noop providers (what the global ones are until an
// SDK is installed), and the SDK with a reader and sampling every span.
func providers(b *testing.B) map[string][]otelleasebus.Option {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider()
	b.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	return map[string][]otelleasebus.Option{
		"noop": {otelleasebus.WithMeterProvider(metricnoop.NewMeterProvider()), otelleasebus.WithTracerProvider(tracenoop.NewTracerProvider())},
		"sdk":  {otelleasebus.WithMeterProvider(mp), otelleasebus.WithTracerProvider(tp)},
	}
}

// BenchmarkMiddleware is the cost the Middleware adds to one delivery: the
// wrapped handler's call and the observer's acked event, against calling
// the handler alone.
func BenchmarkMiddleware(b *testing.B) {
	sub := brokertest.Subscribe(b, realBroker(b), "jobs", "workers")
	handle := func(context.Context, queue.Delivery[string]) error { return nil }
	d := queue.Delivery[string]{Message: queue.Message[string]{Topic: "jobs", Payload: "x"}, Attempt: 1, MaxAttempts: 5}
	ctx := context.Background()
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			d.LeaseID = lease.NewID(1, uint64(i), 1)
			_ = handle(ctx, d)
		}
	})
	for _, name := range []string{"noop", "sdk"} {
		b.Run(name, func(b *testing.B) {
			mw, err := otelleasebus.NewMiddleware(sub, providers(b)[name]...)
			if err != nil {
				b.Fatal(err)
			}
			h := mw.Handler(handle)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				d.LeaseID = lease.NewID(1, uint64(i), 1)
				_ = h(ctx, d)
				mw.Observe(poller.Event[string]{Outcome: poller.OutcomeAcked, Delivery: d})
			}
		})
	}
}

// BenchmarkPublish is a Publisher's Publish against the broker's.
func BenchmarkPublish(b *testing.B) {
	ctx := context.Background()
	newBroker := func(b *testing.B) *broker.Broker[string] {
		bk := realBroker(b, broker.WithSubscriptionDefaults(broker.WithMaxQueue(1<<30)))
		brokertest.Subscribe(b, bk, "jobs", "workers")
		return bk
	}
	b.Run("broker", func(b *testing.B) {
		bk := newBroker(b)
		b.ReportAllocs()
		for range b.N {
			if _, err := bk.Publish(ctx, "jobs", "x"); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, name := range []string{"noop", "sdk"} {
		b.Run(name, func(b *testing.B) {
			bk := newBroker(b)
			pub, err := otelleasebus.NewPublisher(bk, providers(b)[name]...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := pub.Publish(ctx, "jobs", "x"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// realBroker is a broker on the real clock, as in production (spans then
// take the SDK's own timestamps), closed when the benchmark ends.
func realBroker(b *testing.B, opts ...broker.Option) *broker.Broker[string] {
	bk, err := broker.New[string](opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bk.Close() })
	return bk
}
