package otelleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/otelleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// runUntilIdle runs p until its source is idle, within the hang guard.
func runUntilIdle[T any](t *testing.T, p *poller.Poller[T]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := p.RunUntilIdle(ctx); err != nil {
		t.Fatalf("RunUntilIdle: %v", err)
	}
}

// processSpans returns the ended process spans in the order they started.
func processSpans(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), "process ") {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return out
}

// A pool over four messages, on a mock clock that only the handlers move:
// every outcome, every duration and every span attribute is exact.
func TestMiddlewarePollerExact(t *testing.T) {
	tel := newTelemetry(t)
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "jobs", "workers",
		broker.WithMaxAttempts(2),
		broker.WithVisibilityTimeout(time.Minute),
		broker.WithRetry(queue.RetryPolicy{NoBackoff: true}))
	msgs := brokertest.Publish(t, b, "jobs", "ok", "flaky", "poison", "doomed")
	errFlaky := errors.New("flaky")

	mw, err := otelleasebus.NewMiddleware(sub, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	handle := func(ctx context.Context, d queue.Delivery[string]) error {
		if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
			t.Errorf("%s: the handler's context has no span", d.Payload)
		}
		switch d.Payload {
		case "ok":
			mock.Add(250 * time.Millisecond)
			return nil
		case "flaky":
			mock.Add(100 * time.Millisecond)
			if d.Attempt == 1 {
				return fmt.Errorf("attempt %d: %w", d.Attempt, errFlaky)
			}
			return nil
		case "poison":
			return poller.GiveUp(errors.New("unparseable"))
		default:
			mock.Add(2 * time.Second)
			panic("doomed")
		}
	}
	p, err := poller.New(sub, mw.Handler(handle), mw.Observer())
	if err != nil {
		t.Fatal(err)
	}
	runUntilIdle(t, p)

	// The spans: one per delivery, in delivery order, each on the mock
	// clock, with its attempt, outcome and error.
	type want struct {
		payload string
		attempt int
		outcome string
		errType string
		dur     time.Duration
	}
	wants := []want{
		{"ok", 1, "acked", "", 250 * time.Millisecond},
		{"flaky", 1, "retried", "*errors.errorString", 100 * time.Millisecond},
		{"flaky", 2, "acked", "", 100 * time.Millisecond},
		{"poison", 1, "dead-lettered", "*errors.errorString", 0},
		{"doomed", 1, "retried", "panic", 2 * time.Second},
		{"doomed", 2, "dead-lettered", "panic", 2 * time.Second},
	}
	ids := map[string]string{}
	for _, m := range msgs {
		ids[m.Payload] = m.ID.String()
	}
	spans := processSpans(tel.spans.Ended())
	if len(spans) != len(wants) {
		t.Fatalf("%d process spans, want %d", len(spans), len(wants))
	}
	at := brokertest.Epoch
	for i, w := range wants {
		s := spans[i]
		what := fmt.Sprintf("span %d (%s, attempt %d)", i, w.payload, w.attempt)
		a := map[string]string{
			"messaging.system":                        "leasebus",
			"messaging.operation.name":                "process",
			"messaging.operation.type":                "process",
			"messaging.destination.name":              "jobs",
			"messaging.consumer.group.name":           "workers",
			"messaging.destination.subscription.name": "workers",
			"messaging.message.id":                    ids[w.payload],
			"leasebus.message.delivery_attempt":       fmt.Sprint(w.attempt),
			"leasebus.message.max_attempts":           "2",
			"leasebus.outcome":                        w.outcome,
		}
		if w.errType != "" {
			a["error.type"] = w.errType
		}
		equalAttrs(t, what, s.Attributes(), a)
		if s.Name() != "process jobs" || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("%s: %q kind %v, want \"process jobs\" kind consumer", what, s.Name(), s.SpanKind())
		}
		if !s.StartTime().Equal(at) || s.EndTime().Sub(s.StartTime()) != w.dur {
			t.Errorf("%s: from %v for %v, want from %v for %v", what, s.StartTime(), s.EndTime().Sub(s.StartTime()), at, w.dur)
		}
		at = at.Add(w.dur)
		if w.errType == "" {
			if s.Status().Code != codes.Unset || len(s.Events()) != 0 {
				t.Errorf("%s: status %v, events %v, want neither", what, s.Status(), s.Events())
			}
		} else if s.Status().Code != codes.Error || len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
			t.Errorf("%s: status %v, events %v, want an error and its exception event", what, s.Status(), s.Events())
		}
		if s.Parent().IsValid() || len(s.Links()) != 0 {
			t.Errorf("%s: parent %v, links %v: the message carried no trace context", what, s.Parent(), s.Links())
		}
	}

	// The metrics: exact counts, and durations summed on the mock clock.
	base := "messaging.consumer.group.name=workers,messaging.destination.name=jobs,messaging.destination.subscription.name=workers,messaging.operation.name=process,messaging.system=leasebus"
	with := func(kv ...string) string { return sortedJoin(append(strings.Split(base, ","), kv...)) }
	equalPoints(t, tel.collect(t), map[string]string{
		"messaging.client.consumed.messages{" + base + "}": "6",

		"messaging.process.duration{" + with("leasebus.outcome=acked") + "}":                                           "count=2 sum=0.35",
		"messaging.process.duration{" + with("leasebus.outcome=retried", "error.type=*errors.errorString") + "}":       "count=1 sum=0.1",
		"messaging.process.duration{" + with("leasebus.outcome=retried", "error.type=panic") + "}":                     "count=1 sum=2",
		"messaging.process.duration{" + with("leasebus.outcome=dead-lettered", "error.type=*errors.errorString") + "}": "count=1 sum=0",
		"messaging.process.duration{" + with("leasebus.outcome=dead-lettered", "error.type=panic") + "}":               "count=1 sum=2",
		"leasebus.poller.outcomes{" + with("leasebus.outcome=acked") + "}":                                             "2",
		"leasebus.poller.outcomes{" + with("leasebus.outcome=retried") + "}":                                           "2",
		"leasebus.poller.outcomes{" + with("leasebus.outcome=dead-lettered") + "}":                                     "2",
	})
}

// A message published through a Publisher links its process span to the
// publish span (the default, as the semantic conventions recommend), or,
// with WithPublisherAsParent, makes it a child; either way the handler's
// context holds the process span, and the message's baggage.
func TestTraceFromPublisherToHandler(t *testing.T) {
	for _, asParent := range []bool{false, true} {
		t.Run(fmt.Sprintf("asParent=%v", asParent), func(t *testing.T) {
			tel := newTelemetry(t)
			b, _ := brokertest.New[string](t)
			sub := brokertest.Subscribe(t, b, "orders", "billing")
			pub, err := otelleasebus.NewPublisher(b, tel.options()...)
			if err != nil {
				t.Fatal(err)
			}
			var opts []otelleasebus.Option
			if asParent {
				opts = append(opts, otelleasebus.WithPublisherAsParent())
			}
			mw, err := otelleasebus.NewMiddleware(sub, tel.options(opts...)...)
			if err != nil {
				t.Fatal(err)
			}

			member, _ := baggage.NewMember("tenant", "acme")
			bag, _ := baggage.New(member)
			ctx := baggage.ContextWithBaggage(context.Background(), bag)
			ctx, request := tel.tp.Tracer("test").Start(ctx, "request")
			msg, err := pub.Publish(ctx, "orders", "o-1")
			if err != nil {
				t.Fatal(err)
			}
			request.End()

			var tenant string
			p, err := poller.New(sub, mw.Handler(func(ctx context.Context, d queue.Delivery[string]) error {
				tenant = baggage.FromContext(ctx).Member("tenant").Value()
				_, work := tel.tp.Tracer("test").Start(ctx, "charge")
				work.End()
				return nil
			}), mw.Observer())
			if err != nil {
				t.Fatal(err)
			}
			runUntilIdle(t, p)

			ended := tel.spans.Ended()
			publish := spanNamed(t, ended, "publish orders")
			process := spanNamed(t, ended, "process orders")
			charge := spanNamed(t, ended, "charge")
			if charge.Parent().SpanID() != process.SpanContext().SpanID() {
				t.Errorf("the handler's span is not a child of the process span")
			}
			if tenant != "acme" {
				t.Errorf("the handler's baggage has tenant %q, want acme", tenant)
			}
			if got := attrs(process.Attributes())["messaging.message.id"]; got != msg.ID.String() {
				t.Errorf("messaging.message.id %q, want %q", got, msg.ID)
			}
			if asParent {
				if process.Parent().SpanID() != publish.SpanContext().SpanID() || process.SpanContext().TraceID() != request.SpanContext().TraceID() {
					t.Errorf("the process span is not a child of the publish span")
				}
				if !process.Parent().IsRemote() {
					t.Errorf("the process span's parent came from the message, and should be remote")
				}
				if len(process.Links()) != 0 {
					t.Errorf("links %v, want none beside the parent", process.Links())
				}
				return
			}
			if process.Parent().IsValid() {
				t.Errorf("the process span has parent %v, want none (a trace of its own)", process.Parent())
			}
			if process.SpanContext().TraceID() == request.SpanContext().TraceID() {
				t.Errorf("the process span is in the publisher's trace, want a trace of its own")
			}
			if len(process.Links()) != 1 || !process.Links()[0].SpanContext.Equal(publish.SpanContext().WithRemote(true)) {
				t.Errorf("links %v, want one to the publish span %v", process.Links(), publish.SpanContext())
			}
		})
	}
}

// extending shows the poller only the Source methods of a subscription,
// its AwaitIdle and its Config, as a remote backend would: it is no
// backend.PoolPoller, so the poller extends its leases on timers instead
// of holding them for the whole limit.
type extending struct {
	poller.Source[string]
	sub *broker.Subscription[string]
}

func (e extending) AwaitIdle(ctx context.Context) error { return e.sub.AwaitIdle(ctx) }
func (e extending) Config() queue.Config                { return e.sub.Config() }

// A lease extension is an event on the span of the delivery being
// processed, and an outcome in the counter; Observe works from an observer
// of the user's.
func TestMiddlewareExtension(t *testing.T) {
	tel := newTelemetry(t)
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "jobs", "workers", broker.WithVisibilityTimeout(10*time.Second))
	brokertest.Publish(t, b, "jobs", "long")
	mw, err := otelleasebus.NewMiddleware(sub, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	extended := make(chan poller.Event[string], 1)
	var ext poller.Event[string] // the extension, as the observer saw it
	p, err := poller.New[string](extending{sub, sub}, mw.Handler(func(ctx context.Context, d queue.Delivery[string]) error {
		mock.Add(9 * time.Second) // past the extension point, 8s (10s less a fifth)
		select {
		case ext = <-extended:
		case <-time.After(hangGuard):
			t.Error("no extension")
		}
		return nil
	}), poller.WithObserver(func(e poller.Event[string]) {
		mw.Observe(e)
		if e.Outcome == poller.OutcomeExtended {
			extended <- e
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	runUntilIdle(t, p)

	s := spanNamed(t, tel.spans.Ended(), "process jobs")
	if s.EndTime().Sub(s.StartTime()) != 9*time.Second {
		t.Errorf("span lasts %v, want 9s", s.EndTime().Sub(s.StartTime()))
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "lease extended" {
		t.Fatalf("events %v, want one \"lease extended\"", s.Events())
	}
	ev := s.Events()[0]
	if got, want := attrs(ev.Attributes)["leasebus.lease.deadline"], ext.Delivery.Deadline.UTC().Format(time.RFC3339Nano); got != want {
		t.Errorf("the event's deadline %q, want the extension's %q", got, want)
	}
	if !ext.Delivery.Deadline.After(brokertest.Epoch.Add(10 * time.Second)) {
		t.Errorf("the extension's deadline %v is not past the first one", ext.Delivery.Deadline)
	}
	base := "messaging.consumer.group.name=workers,messaging.destination.name=jobs,messaging.destination.subscription.name=workers,messaging.operation.name=process,messaging.system=leasebus"
	with := func(kv ...string) string { return sortedJoin(append(strings.Split(base, ","), kv...)) }
	got := tel.collect(t)
	equalPoints(t, only(got, "leasebus.poller."), map[string]string{
		"leasebus.poller.outcomes{" + with("leasebus.outcome=extended") + "}": "1",
		"leasebus.poller.outcomes{" + with("leasebus.outcome=acked") + "}":    "1",
	})
}

// A settle the source refuses (the handler acked the lease itself, so the
// poller's Ack finds nothing) is an error on the span and in the counter.
func TestMiddlewareSettleRefused(t *testing.T) {
	tel := newTelemetry(t)
	b, _ := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "jobs", "workers")
	brokertest.Publish(t, b, "jobs", "x")
	mw, err := otelleasebus.NewMiddleware(sub, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	p, err := poller.New(sub, mw.Handler(func(_ context.Context, d queue.Delivery[string]) error {
		return sub.Ack(d.LeaseID)
	}), mw.Observer())
	if err != nil {
		t.Fatal(err)
	}
	runUntilIdle(t, p)

	s := spanNamed(t, tel.spans.Ended(), "process jobs")
	a := attrs(s.Attributes())
	if a["leasebus.outcome"] != "settle-failed" || a["error.type"] != "lease_not_found" {
		t.Errorf("outcome %q, error.type %q; want settle-failed, lease_not_found", a["leasebus.outcome"], a["error.type"])
	}
	if s.Status().Code != codes.Error || !strings.HasPrefix(s.Status().Description, "settle: ") {
		t.Errorf("status %v, want an error that says the settle failed", s.Status())
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "settle failed" {
		t.Errorf("events %v, want \"settle failed\"", s.Events())
	}
	base := "messaging.consumer.group.name=workers,messaging.destination.name=jobs,messaging.destination.subscription.name=workers,messaging.operation.name=process,messaging.system=leasebus"
	with := func(kv ...string) string { return sortedJoin(append(strings.Split(base, ","), kv...)) }
	equalPoints(t, only(tel.collect(t), "leasebus.poller."), map[string]string{
		"leasebus.poller.outcomes{" + with("leasebus.outcome=settle-failed", "error.type=lease_not_found") + "}": "1",
	})
}

// Released deliveries (a drain) are counted, with no span: their handler
// never started.
func TestMiddlewareReleased(t *testing.T) {
	tel := newTelemetry(t)
	b, _ := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "jobs", "workers")
	brokertest.Publish(t, b, "jobs", "first", "waiting")
	mw, err := otelleasebus.NewMiddleware(sub, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started, release := make(chan struct{}), make(chan struct{})
	p, err := poller.New(sub, mw.Handler(func(context.Context, queue.Delivery[string]) error {
		close(started)
		// Hold the one worker until Run's context is cancelled, all of it:
		// the poller's own context, a child of it, is cancelled after the
		// parent's Done closes, so waiting on ctx.Done here could let the
		// worker start "waiting" before it sees the cancellation.
		<-release
		return nil
	}), mw.Observer(), poller.WithMaxOutstanding(2), poller.WithBatch(2))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-started:
	case <-time.After(hangGuard):
		t.Fatal("the handler did not start")
	}
	cancel()
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Run did not return")
	}
	if n := len(processSpans(tel.spans.Ended())); n != 1 {
		t.Errorf("%d process spans, want 1 (the released delivery never started)", n)
	}
	base := "messaging.consumer.group.name=workers,messaging.destination.name=jobs,messaging.destination.subscription.name=workers,messaging.operation.name=process,messaging.system=leasebus"
	with := func(kv ...string) string { return sortedJoin(append(strings.Split(base, ","), kv...)) }
	equalPoints(t, only(tel.collect(t), "leasebus.poller."), map[string]string{
		"leasebus.poller.outcomes{" + with("leasebus.outcome=acked") + "}":    "1",
		"leasebus.poller.outcomes{" + with("leasebus.outcome=released") + "}": "1",
	})
}
