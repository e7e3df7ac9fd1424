package otelleasebus

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// durationBuckets are the histogram boundaries, in seconds, that the
// semantic conventions advise for messaging durations.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// Publisher publishes with a producer span per call, whose context
// travels in the message's headers so that consumers can link to it (or
// continue it; see WithPublisherAsParent), and counts and times the
// publishes. Make one with NewPublisher over a broker, or NewPublisherFor
// over any backend's publisher; its methods are safe for concurrent use.
type Publisher[T any] struct {
	pub      backend.Publisher[T]
	batch    batchPublisher[T] // nil: the backend has no batch; PublishBatch publishes each
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	clock    clock.Clock
	stamp    bool // spans take their times from clock (it is not the real one)
	sent     metric.Int64Counter
	duration metric.Float64Histogram
	topics   topicCache[*publishTopic]
}

// publishTopic is what a Publisher makes once per topic, so that a
// publish allocates nothing for it.
type publishTopic struct {
	spanName  string                  // "publish <topic>"
	startOpts []trace.SpanStartOption // kind and the topic's attributes (len == cap)
	base      []attribute.KeyValue    // the measurements' attributes, before error.type
	added     []metric.AddOption      // a successful publish's
	recorded  []metric.RecordOption
}

// batchPublisher is a backend's publisher that publishes many at once.
type batchPublisher[T any] interface {
	PublishBatch(ctx context.Context, topic string, payloads []T, opts ...queue.PublishOption) ([]queue.Message[T], error)
}

// NewPublisher returns a Publisher over b. Options that apply:
// WithTracerProvider, WithMeterProvider, WithPropagator, WithClock
// (default b.Clock(), so that durations on a mock clock are exact) and
// WithAttributes. A nil b is an invalid argument.
func NewPublisher[T any](b *broker.Broker[T], opts ...Option) (*Publisher[T], error) {
	if b == nil {
		return nil, invalid("NewPublisher: nil broker")
	}
	return NewPublisherFor[T](b, opts...)
}

// NewPublisherFor returns a Publisher over any backend's publisher (a
// broker, natsleasebus's, sqsleasebus's or pgleasebus's
// backend.Publisher): the trace context travels in the headers every
// backend carries. PublishBatch uses the backend's own batch when it has
// one, and publishes each payload in turn, in the one span, when it does
// not. Options are NewPublisher's; WithClock defaults to the publisher's
// clock when it has one (a Clock method), else the real one. A nil pub is
// an invalid argument.
func NewPublisherFor[T any](pub backend.Publisher[T], opts ...Option) (*Publisher[T], error) {
	if pub == nil {
		return nil, invalid("NewPublisherFor: nil publisher")
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	clk := c.clock
	if clk == nil {
		clk = clock.New()
		if cl, ok := pub.(interface{ Clock() clock.Clock }); ok {
			clk = cl.Clock()
		}
	}
	m := c.meter()
	sent, err := messagingconv.NewClientSentMessages(m)
	if err != nil {
		return nil, err
	}
	dur, err := messagingconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err != nil {
		return nil, err
	}
	p := &Publisher[T]{pub: pub, tracer: c.tracer(), prop: c.propagator, clock: clk, stamp: !isRealClock(clk), sent: sent.Inst(), duration: dur.Inst()}
	if bp, ok := pub.(batchPublisher[T]); ok {
		p.batch = bp
	}
	extra := c.attrs
	p.topics.make = func(topic string) *publishTopic {
		base := []attribute.KeyValue{
			systemAttr,
			semconv.MessagingOperationName(opPublish),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(topic),
		}
		base = append(base, extra...)
		ok := metric.WithAttributeSet(attribute.NewSet(base...))
		return &publishTopic{
			spanName:  opPublish + " " + topic,
			startOpts: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(base...)},
			base:      base,
			added:     []metric.AddOption{ok},
			recorded:  []metric.RecordOption{ok},
		}
	}
	return p, nil
}

// Publish publishes payload to topic as the backend's Publish does, in a span "publish
// <topic>" (kind producer) whose context it injects into the message's
// headers. opts are the publish's options; a queue.WithHeaders among them
// adds its headers to the trace context (WithHeaders options merge, a
// later value winning), so only one that names a
// trace key (traceparent, tracestate, baggage) replaces it: the span then
// gets a "trace context not propagated" event. To send a creation context
// of your own, linked from the publish span, use PublishWithHeaders.
func (p *Publisher[T]) Publish(ctx context.Context, topic string, payload T, opts ...queue.PublishOption) (queue.Message[T], error) {
	return p.PublishWithHeaders(ctx, topic, payload, nil, opts...)
}

// PublishWithHeaders is Publish with headers of the caller's: the message
// carries headers and the trace context. If headers already carry a trace
// context the propagator can read (a creation context of the caller's),
// it is kept as it is, and the span links to it. headers is read, not
// changed; a queue.WithHeaders in opts adds to them, a later value
// winning.
func (p *Publisher[T]) PublishWithHeaders(ctx context.Context, topic string, payload T, headers map[string]string, opts ...queue.PublishOption) (queue.Message[T], error) {
	if ctx == nil {
		return queue.Message[T]{}, invalid("Publish: nil context")
	}
	ctx, op := p.start(ctx, topic, headers, 0)
	msg, err := p.pub.Publish(ctx, topic, payload, op.options(opts)...)
	if err == nil {
		if op.span.IsRecording() {
			op.span.SetAttributes(semconv.MessagingMessageID(msg.ID.String()))
		}
		op.check(msg.Headers)
	}
	p.end(ctx, &op, 1, err)
	return msg, err
}

// PublishBatch publishes payloads to topic as the backend's PublishBatch
// does (or, without one, each in turn, stopping at the first error), in
// one span "publish <topic>" (kind producer, with
// messaging.batch.message_count) whose context every message carries. As
// with Publish, a queue.WithHeaders in opts adds to the trace headers.
func (p *Publisher[T]) PublishBatch(ctx context.Context, topic string, payloads []T, opts ...queue.PublishOption) ([]queue.Message[T], error) {
	return p.PublishBatchWithHeaders(ctx, topic, payloads, nil, opts...)
}

// PublishBatchWithHeaders is PublishBatch with headers of the caller's on
// every message, beside the trace context (see PublishWithHeaders).
func (p *Publisher[T]) PublishBatchWithHeaders(ctx context.Context, topic string, payloads []T, headers map[string]string, opts ...queue.PublishOption) ([]queue.Message[T], error) {
	if ctx == nil {
		return nil, invalid("PublishBatch: nil context")
	}
	ctx, op := p.start(ctx, topic, headers, len(payloads))
	msgs, err := p.publishBatch(ctx, topic, payloads, op.options(opts))
	if err == nil && len(msgs) > 0 {
		op.check(msgs[0].Headers)
	}
	p.end(ctx, &op, len(payloads), err)
	return msgs, err
}

// publishBatch publishes payloads with the backend's batch, or each in
// turn.
func (p *Publisher[T]) publishBatch(ctx context.Context, topic string, payloads []T, opts []queue.PublishOption) ([]queue.Message[T], error) {
	if p.batch != nil {
		return p.batch.PublishBatch(ctx, topic, payloads, opts...)
	}
	msgs := make([]queue.Message[T], 0, len(payloads))
	for _, payload := range payloads {
		m, err := p.pub.Publish(ctx, topic, payload, opts...)
		if err != nil {
			return msgs, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// publishOp is one publish under way.
type publishOp struct {
	span    trace.Span
	start   time.Time
	topic   *publishTopic
	headers map[string]string // nil: none to set
	probe   string            // a key the propagator injected; "" if none
	value   string            // what it injected there
}

// start starts the span of a publish of batch messages (0: a single
// Publish) and makes the headers to send.
func (p *Publisher[T]) start(ctx context.Context, topic string, user map[string]string, batch int) (context.Context, publishOp) {
	op := publishOp{start: p.clock.Now(), topic: p.topics.get(topic)}
	so := op.topic.startOpts
	if batch > 0 {
		so = append(so[:len(so):len(so)], trace.WithAttributes(semconv.MessagingBatchMessageCount(batch)))
	}
	custom := false
	if len(user) > 0 {
		// A creation context of the caller's is kept, and linked to.
		if sc := trace.SpanContextFromContext(p.prop.Extract(context.Background(), propagation.MapCarrier(user))); sc.IsValid() {
			custom = true
			so = append(so[:len(so):len(so)], trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	if p.stamp {
		so = append(so[:len(so):len(so)], trace.WithTimestamp(op.start))
	}
	ctx, op.span = p.tracer.Start(ctx, op.topic.spanName, so...)
	carrier := lazyCarrier{m: nil, size: len(user)}
	if !custom {
		p.prop.Inject(ctx, &carrier)
		op.probe, op.value = carrier.first, carrier.m[carrier.first]
	}
	switch {
	case carrier.m == nil && len(user) > 0:
		op.headers = user // nothing injected: the caller's map, which the broker copies
	case carrier.m != nil:
		for k, v := range user {
			if _, ok := carrier.m[k]; !ok {
				carrier.m[k] = v
			}
		}
		op.headers = carrier.m
	}
	return ctx, op
}

// options returns opts with the headers first, so that a WithHeaders of
// the caller's in opts wins for a key both name (their headers are never
// lost; the trace context can be, and check says so).
func (op *publishOp) options(opts []queue.PublishOption) []queue.PublishOption {
	if op.headers == nil {
		return opts
	}
	all := make([]queue.PublishOption, 0, len(opts)+1)
	all = append(all, queue.WithHeaders(op.headers))
	return append(all, opts...)
}

// check records on the span that the trace context did not reach the
// message, when a WithHeaders in the caller's options replaced its value.
func (op *publishOp) check(h queue.Headers) {
	if op.probe == "" {
		return
	}
	if v, _ := h.Lookup(op.probe); v != op.value {
		op.span.AddEvent("trace context not propagated",
			trace.WithAttributes(attribute.String("reason", "a WithHeaders option named a trace header; use PublishWithHeaders for a creation context of your own")))
	}
}

// end ends a publish of n messages that returned err.
func (p *Publisher[T]) end(ctx context.Context, op *publishOp, n int, err error) {
	end := p.clock.Now()
	added, recorded := op.topic.added, op.topic.recorded
	if err != nil {
		et := semconv.ErrorTypeKey.String(errorType(err))
		if op.span.IsRecording() {
			op.span.SetAttributes(et)
			op.span.RecordError(err, trace.WithTimestamp(end))
			op.span.SetStatus(codes.Error, err.Error())
		}
		mo := metric.WithAttributes(append(op.topic.base[:len(op.topic.base):len(op.topic.base)], et)...)
		added, recorded = []metric.AddOption{mo}, []metric.RecordOption{mo}
	}
	p.sent.Add(ctx, int64(n), added...)
	p.duration.Record(ctx, end.Sub(op.start).Seconds(), recorded...)
	if p.stamp && op.span.IsRecording() {
		op.span.End(trace.WithTimestamp(end))
	} else {
		op.span.End()
	}
}

// lazyCarrier is a TextMapCarrier that allocates its map on the first Set,
// so that a publish with nothing to inject allocates nothing for it.
type lazyCarrier struct {
	m     map[string]string
	size  int    // the caller's headers, to size the map for them too
	first string // the first key set
}

func (c *lazyCarrier) Get(key string) string { return c.m[key] }

func (c *lazyCarrier) Set(key, value string) {
	if c.m == nil {
		c.m = make(map[string]string, c.size+2)
		c.first = key
	}
	c.m[key] = value
}

func (c *lazyCarrier) Keys() []string {
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	return keys
}

// maxCachedTopics bounds a topicCache: past it, what a topic needs is made
// at each use instead of kept (a wildcard subscription may see any number
// of topics).
const maxCachedTopics = 1024

// topicCache keeps what is made once per topic (span names, attribute
// sets), up to maxCachedTopics topics.
type topicCache[V any] struct {
	make func(topic string) V
	m    sync.Map // string -> V
	n    atomic.Int64
}

func (c *topicCache[V]) get(topic string) V {
	if v, ok := c.m.Load(topic); ok {
		return v.(V)
	}
	v := c.make(topic)
	if c.n.Load() < maxCachedTopics {
		if actual, loaded := c.m.LoadOrStore(topic, v); loaded {
			return actual.(V)
		}
		c.n.Add(1)
	}
	return v
}
