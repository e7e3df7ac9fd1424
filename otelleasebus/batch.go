package otelleasebus

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// BatchHandler wraps a batch handler h (poller.NewBatch) as Handler wraps
// a Handler, with one span a call: each call counts its deliveries
// (messaging.client.consumed.messages), starts one span "process <topic>"
// (kind consumer, the topic of the call's first delivery) with
// messaging.batch.message_count and a link to each delivery's publisher
// span found in its headers, and calls h with the span's context. Observe
// records each delivery's outcome and the call's duration, adds each
// outcome to the span as an event "message settled" (its ID, outcome and
// error type), and ends the span with the last of them, its status an
// error if any delivery's outcome was a failure. A nil h gives nil, which
// poller.NewBatch reports as an invalid argument.
func (m *Middleware[T]) BatchHandler(h poller.BatchHandler[T]) poller.BatchHandler[T] {
	if h == nil {
		return nil
	}
	return func(ctx context.Context, ds []queue.Delivery[T]) ([]error, error) {
		if len(ds) == 0 {
			return h(ctx, ds)
		}
		pt := m.topics.get(ds[0].Topic)
		start := m.clock.Now()
		m.consumed.Add(ctx, int64(len(ds)), pt.consumed...)
		ctx, span := m.startBatchSpan(ctx, ds, pt, start)
		if !span.IsRecording() && !m.duration.Enabled(ctx) {
			return h(ctx, ds)
		}
		pr := &processing{span: span, start: start, batch: true, left: len(ds)}
		m.mu.Lock()
		for _, d := range ds {
			m.live[d.LeaseID] = pr
		}
		m.mu.Unlock()
		defer func() { // also when h panics (the poller recovers it) or exits its goroutine
			end := m.clock.Now()
			m.mu.Lock()
			pr.end = end
			m.mu.Unlock()
		}()
		return h(ctx, ds)
	}
}

// startBatchSpan starts a batch call's span at start, linked to each
// delivery's creation context (never a child of one: a call has many).
func (m *Middleware[T]) startBatchSpan(ctx context.Context, ds []queue.Delivery[T], pt *processTopic, start time.Time) (context.Context, trace.Span) {
	opts := append(pt.startOpts[:len(pt.startOpts):len(pt.startOpts)], trace.WithAttributes(semconv.MessagingBatchMessageCount(len(ds))))
	if m.stamp {
		opts = append(opts, trace.WithTimestamp(start))
	}
	for _, d := range ds {
		if d.Headers.Len() == 0 {
			continue
		}
		extracted := m.prop.Extract(context.Background(), HeadersCarrier{Headers: d.Headers})
		if created := trace.SpanContextFromContext(extracted); created.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: created,
				Attributes: []attribute.KeyValue{semconv.MessagingMessageID(d.ID.String())}}))
		}
	}
	return m.tracer.Start(ctx, pt.spanName, opts...)
}

// settledInBatch records a batch delivery's outcome on its call's span,
// and ends the span with the call's last outcome.
func (m *Middleware[T]) settledInBatch(pr *processing, e poller.Event[T], end time.Time) {
	failed := e.Err != nil || e.SourceErr != nil
	attrs := []attribute.KeyValue{semconv.MessagingMessageID(e.Delivery.ID.String()), outcomeKey.String(e.Outcome.String())}
	switch {
	case e.Err != nil:
		attrs = append(attrs, semconv.ErrorTypeKey.String(errorType(e.Err)), semconv.ExceptionMessage(e.Err.Error()))
	case e.SourceErr != nil:
		attrs = append(attrs, semconv.ErrorTypeKey.String(errorType(e.SourceErr)), semconv.ExceptionMessage("settle: "+e.SourceErr.Error()))
	}
	pr.span.AddEvent("message settled", trace.WithTimestamp(end), trace.WithAttributes(attrs...))
	m.mu.Lock()
	pr.left--
	pr.failed = pr.failed || failed
	last, anyFailed := pr.left == 0, pr.failed
	m.mu.Unlock()
	if !last {
		return
	}
	if anyFailed {
		pr.span.SetStatus(codes.Error, "a message of the batch failed")
	}
	pr.span.End(trace.WithTimestamp(end))
}
