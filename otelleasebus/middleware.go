package otelleasebus

import (
	"context"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Middleware instruments a poller: Handler wraps its handler, so that each
// delivery is processed in a span of its own and timed; Observer (or
// Observe, called from an observer of your own) receives the poller's
// outcome of each delivery, ends the span with it and records the
// metrics. Use both together:
//
//	mw, err := otelleasebus.NewMiddleware(sub)
//	p, err := poller.New(sub, mw.Handler(handle), mw.Observer(), poller.WithWorkers(8))
//
// The poller reports every delivery it started exactly once, with its
// outcome, right after the handler returns and the lease is settled, on
// the handler's goroutine; the Middleware keeps what it needs for a
// delivery from the handler's start to that report. A handler wrapped
// without the observer installed would have its deliveries kept forever:
// do not do that. Its methods are safe for concurrent use.
type Middleware[T any] struct {
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	clock    clock.Clock
	stamp    bool // spans take their times from clock (it is not the real one)
	asParent bool
	consumed metric.Int64Counter
	duration metric.Float64Histogram
	outcomes metric.Int64Counter
	topics   topicCache[*processTopic]

	mu   sync.Mutex               // guards live, and the end of every processing in it
	live map[lease.ID]*processing // deliveries whose handler started and whose outcome is not reported yet
}

// processing is one delivery between its handler's start and its outcome.
type processing struct {
	span       trace.Span
	start, end time.Time // end: when the handler returned (guarded by Middleware.mu)
	batch      bool      // a batch handler's call (BatchHandler): its span ends with its last outcome
	left       int       // a batch's outcomes still to come (guarded by Middleware.mu)
	failed     bool      // a batch's delivery failed (guarded by Middleware.mu)
}

// lastOutcome is the highest poller.Outcome this package knows.
const lastOutcome = poller.OutcomeSettleFailed

// processTopic is what a Middleware makes once per topic, so that a
// delivery allocates nothing for it.
type processTopic struct {
	spanName  string                                 // "process <topic>"
	startOpts []trace.SpanStartOption                // kind and the topic's attributes (len == cap)
	base      []attribute.KeyValue                   // the measurements' attributes, before the outcome
	consumed  []metric.AddOption                     // messaging.client.consumed.messages
	added     [lastOutcome + 1][]metric.AddOption    // base + leasebus.outcome, without error.type
	recorded  [lastOutcome + 1][]metric.RecordOption // the same, to record
}

// NewMiddleware returns a Middleware for a poller over src (src is not
// called; T is the poller's payload type). The subscription attributes
// come from src's Name() string method, if it has one (a
// *broker.Subscription has); the destination is each message's topic.
// Options that apply: WithTracerProvider, WithMeterProvider,
// WithPropagator, WithPublisherAsParent, WithClock (default: src's clock,
// through its Config() queue.Config method or, for a remote backend's
// subscription, its Clock method (backend.Clocked), as the poller takes
// it; else the real clock) and WithAttributes. A nil src is an invalid
// argument.
func NewMiddleware[T any](src poller.Source[T], opts ...Option) (*Middleware[T], error) {
	if src == nil {
		return nil, invalid("NewMiddleware: nil source")
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	clk := c.clock
	if clk == nil {
		if s, ok := src.(interface{ Config() queue.Config }); ok {
			clk = s.Config().Clock
		} else if s, ok := src.(backend.Clocked); ok { // a remote backend's subscription
			clk = s.Clock()
		}
		if clk == nil {
			clk = clock.New()
		}
	}
	var name string
	if s, ok := src.(interface{ Name() string }); ok {
		name = s.Name()
	}
	m := c.meter()
	consumed, err := messagingconv.NewClientConsumedMessages(m)
	if err != nil {
		return nil, err
	}
	dur, err := messagingconv.NewProcessDuration(m, metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err != nil {
		return nil, err
	}
	outcomes, err := m.Int64Counter("leasebus.poller.outcomes",
		metric.WithUnit("{event}"),
		metric.WithDescription("Outcomes a poller reported for the deliveries it held, by leasebus.outcome; error.type when the source refused the call that carried it."))
	if err != nil {
		return nil, err
	}
	mw := &Middleware[T]{
		tracer:   c.tracer(),
		prop:     c.propagator,
		clock:    clk,
		stamp:    !isRealClock(clk),
		asParent: c.asParent,
		consumed: consumed.Inst(),
		duration: dur.Inst(),
		outcomes: outcomes,
		live:     map[lease.ID]*processing{},
	}
	extra := c.attrs
	mw.topics.make = func(topic string) *processTopic {
		base := []attribute.KeyValue{systemAttr, semconv.MessagingOperationName(opProcess), semconv.MessagingDestinationName(topic)}
		if name != "" {
			base = append(base, semconv.MessagingConsumerGroupName(name), semconv.MessagingDestinationSubscriptionName(name))
		}
		base = append(base, extra...)
		pt := &processTopic{
			spanName: opProcess + " " + topic,
			startOpts: []trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(append(base[:len(base):len(base)], semconv.MessagingOperationTypeProcess)...),
			},
			base:     base,
			consumed: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(base...))},
		}
		for o := poller.OutcomeAcked; o <= lastOutcome; o++ {
			mo := metric.WithAttributeSet(attribute.NewSet(append(base[:len(base):len(base)], outcomeKey.String(o.String()))...))
			pt.added[o], pt.recorded[o] = []metric.AddOption{mo}, []metric.RecordOption{mo}
		}
		return pt
	}
	return mw, nil
}

// Handler wraps h: each call counts the delivery
// (messaging.client.consumed.messages), starts a span "process <topic>"
// (kind consumer) linked to, or a child of, the publisher's span found in
// the message's headers, and calls h with the span's context (carrying
// the message's baggage, if any). The span and the handler's duration on
// the clock are finished by Observe when the poller reports the outcome.
// A nil h gives nil, which poller.New reports as an invalid argument.
func (m *Middleware[T]) Handler(h poller.Handler[T]) poller.Handler[T] {
	if h == nil {
		return nil
	}
	return func(ctx context.Context, d queue.Delivery[T]) error {
		return m.process(ctx, d, h)
	}
}

// Observer returns the poller option that installs Observe as an observer
// of the poller's. Observers add up: one of your own (poller.WithObserver)
// sees the same events beside it.
func (m *Middleware[T]) Observer() poller.Option {
	return poller.WithObserver(m.Observe)
}

func (m *Middleware[T]) process(ctx context.Context, d queue.Delivery[T], h poller.Handler[T]) error {
	pt := m.topics.get(d.Topic)
	start := m.clock.Now()
	m.consumed.Add(ctx, 1, pt.consumed...)
	ctx, span := m.startSpan(ctx, d, pt, start)
	if !span.IsRecording() && !m.duration.Enabled(ctx) {
		return h(ctx, d) // nothing to finish when the outcome comes
	}
	pr := &processing{span: span, start: start}
	m.mu.Lock()
	m.live[d.LeaseID] = pr
	m.mu.Unlock()
	defer func() { // also when h panics (the poller recovers it) or exits its goroutine
		end := m.clock.Now()
		m.mu.Lock()
		pr.end = end
		m.mu.Unlock()
	}()
	return h(ctx, d)
}

// startSpan starts d's process span at start, its parent and links as the
// configuration says. It allocates only what a recording span needs.
func (m *Middleware[T]) startSpan(ctx context.Context, d queue.Delivery[T], pt *processTopic, start time.Time) (context.Context, trace.Span) {
	opts := pt.startOpts
	if d.Headers.Len() > 0 { // else there is no creation context, nor baggage, to extract
		extracted := m.prop.Extract(context.Background(), HeadersCarrier{Headers: d.Headers})
		if bag := baggage.FromContext(extracted); bag.Len() > 0 {
			ctx = baggage.ContextWithBaggage(ctx, bag)
		}
		if created := trace.SpanContextFromContext(extracted); created.IsValid() {
			if m.asParent {
				ctx = trace.ContextWithRemoteSpanContext(ctx, created)
			} else {
				opts = append(opts[:len(opts):len(opts)], trace.WithLinks(trace.Link{SpanContext: created}))
			}
		}
	}
	if m.stamp {
		opts = append(opts[:len(opts):len(opts)], trace.WithTimestamp(start))
	}
	ctx, span := m.tracer.Start(ctx, pt.spanName, opts...)
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 4)
		attrs = append(attrs, semconv.MessagingMessageID(d.ID.String()), attemptKey.Int(d.Attempt))
		if d.MaxAttempts > 0 {
			attrs = append(attrs, maxAttemptsKey.Int(d.MaxAttempts))
		}
		if d.Key != "" {
			attrs = append(attrs, keyKey.String(d.Key))
		}
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// Observe records an outcome the poller reported: it counts it
// (leasebus.poller.outcomes); for a delivery whose handler ran, it records
// the handler's duration (messaging.process.duration) and ends its span
// with the outcome, the handler's error and the source's. A lease
// extension shows as an event on the span of the delivery being
// processed. Install it with Observer (or call it from an observer of
// your own).
func (m *Middleware[T]) Observe(e poller.Event[T]) {
	pt := m.topics.get(e.Delivery.Topic)
	id := e.Delivery.LeaseID
	final := e.Outcome != poller.OutcomeExtended && e.Outcome != poller.OutcomeExtensionStopped
	m.mu.Lock()
	pr := m.live[id]
	var end time.Time
	if pr != nil {
		end = pr.end
		if final {
			delete(m.live, id)
		}
	}
	m.mu.Unlock()

	ctx := context.Background()
	if pr != nil {
		ctx = trace.ContextWithSpan(ctx, pr.span) // for exemplars
	}
	m.outcomes.Add(ctx, 1, pt.adds(e.Outcome, e.SourceErr)...)
	if pr == nil {
		return // a delivery never started (released, or extended while it waited)
	}
	span := pr.span
	if !final {
		now := m.clock.Now()
		if e.Outcome == poller.OutcomeExtended {
			span.AddEvent("lease extended", trace.WithTimestamp(now),
				trace.WithAttributes(deadlineKey.String(e.Delivery.Deadline.UTC().Format(time.RFC3339Nano))))
		} else {
			ev := []attribute.KeyValue{deadlineKey.String(e.Delivery.Deadline.UTC().Format(time.RFC3339Nano))}
			if e.Err != nil {
				ev = append(ev, semconv.ErrorTypeKey.String(errorType(e.Err)), semconv.ExceptionMessage(e.Err.Error()))
			}
			span.AddEvent("lease extension stopped", trace.WithTimestamp(now), trace.WithAttributes(ev...))
		}
		return
	}
	m.duration.Record(ctx, end.Sub(pr.start).Seconds(), pt.records(e.Outcome, e.Err)...)
	if pr.batch {
		m.settledInBatch(pr, e, end)
		return
	}
	span.SetAttributes(outcomeKey.String(e.Outcome.String()))
	switch {
	case e.Err != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(e.Err)))
		span.RecordError(e.Err, trace.WithTimestamp(end))
		span.SetStatus(codes.Error, e.Err.Error())
	case e.SourceErr != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(e.SourceErr)))
		span.SetStatus(codes.Error, "settle: "+e.SourceErr.Error())
	}
	if e.SourceErr != nil {
		span.AddEvent("settle failed", trace.WithTimestamp(end), trace.WithAttributes(
			semconv.ErrorTypeKey.String(errorType(e.SourceErr)),
			semconv.ExceptionMessage(e.SourceErr.Error())))
	}
	span.End(trace.WithTimestamp(end))
}

// adds and records return the measurement options for outcome o with
// err's error.type (none for a nil err): made once for each outcome
// without an error, at each call with one.
func (pt *processTopic) adds(o poller.Outcome, err error) []metric.AddOption {
	if err == nil && o >= poller.OutcomeAcked && o <= lastOutcome {
		return pt.added[o]
	}
	return []metric.AddOption{pt.withError(o, err)}
}

func (pt *processTopic) records(o poller.Outcome, err error) []metric.RecordOption {
	if err == nil && o >= poller.OutcomeAcked && o <= lastOutcome {
		return pt.recorded[o]
	}
	return []metric.RecordOption{pt.withError(o, err)}
}

func (pt *processTopic) withError(o poller.Outcome, err error) metric.MeasurementOption {
	attrs := append(pt.base[:len(pt.base):len(pt.base)], outcomeKey.String(o.String()))
	if err != nil {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errorType(err)))
	}
	return metric.WithAttributes(attrs...)
}
