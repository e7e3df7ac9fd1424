package otelleasebus

import (
	"fmt"
	"reflect"

	"github.com/benbjohnson/clock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/queue"
)

// ScopeName is the instrumentation scope of every meter and tracer this
// package makes: the package's import path, as OpenTelemetry recommends.
const ScopeName = "github.com/leasebus/leasebus/otelleasebus"

// System is the value of the messaging.system attribute on every span and
// metric this package records.
const System = "leasebus"

// Attribute keys of this package's own (not in the semantic conventions).
const (
	// outcomeKey is what became of a delivery the poller held
	// (poller.Outcome.String(): "acked", "retried", ...).
	outcomeKey = attribute.Key("leasebus.outcome")
	// attemptKey is a delivery's attempt (1 on the first), as Cloud
	// Pub/Sub's messaging.gcp_pubsub.message.delivery_attempt.
	attemptKey = attribute.Key("leasebus.message.delivery_attempt")
	// maxAttemptsKey is the subscription's limit on attempts, when it has
	// one.
	maxAttemptsKey = attribute.Key("leasebus.message.max_attempts")
	// keyKey is the message's ordering key, when it has one.
	keyKey = attribute.Key("leasebus.message.key")
	// stateKey is the state of the messages a subscription holds.
	stateKey = attribute.Key("leasebus.message.state")
	// reasonKey is why messages were dead-lettered (queue.Reason.String()).
	reasonKey = attribute.Key("leasebus.dead_letter.reason")
	// deadlineKey is a lease's new deadline, on a "lease extended" event.
	deadlineKey = attribute.Key("leasebus.lease.deadline")
)

// Operation names (messaging.operation.name).
const (
	opPublish = "publish"
	opProcess = "process"
)

var (
	systemAttr = semconv.MessagingSystemKey.String(System)
)

// Option configures what this package builds: a Publisher, a Middleware,
// or an observation of subscription statistics. Every option may be given
// to each of them; the ones that do not apply are ignored (a Publisher has
// no use for WithPublisherAsParent, an observation none for a tracer).
// An invalid option makes the constructor return an error matching
// queue.ErrInvalidArgument.
type Option struct{ apply func(*config) }

type config struct {
	meterProvider  metric.MeterProvider
	tracerProvider trace.TracerProvider
	propagator     propagation.TextMapPropagator
	clock          clock.Clock
	asParent       bool
	attrs          []attribute.KeyValue
	err            error
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// invalid returns an error that says what is wrong and matches
// queue.ErrInvalidArgument.
func invalid(format string, args ...any) error {
	return fmt.Errorf("otelleasebus: %s: %w", fmt.Sprintf(format, args...), queue.ErrInvalidArgument)
}

// newConfig applies opts over the defaults: the global providers, the
// global propagator if one is set (else W3C Trace Context and Baggage).
func newConfig(opts []Option) (*config, error) {
	c := &config{}
	for i, o := range opts {
		if o.apply == nil {
			return nil, invalid("option %d is the zero Option: make options with the With functions", i)
		}
		o.apply(c)
	}
	if c.err != nil {
		return nil, c.err
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	if c.tracerProvider == nil {
		c.tracerProvider = otel.GetTracerProvider()
	}
	if c.propagator == nil {
		c.propagator = otel.GetTextMapPropagator()
		if len(c.propagator.Fields()) == 0 {
			// No global propagator is set: the messages still carry a
			// trace context, in the W3C format.
			c.propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		}
	}
	return c, nil
}

// realClockType is the type of clock.New()'s clock.
var realClockType = reflect.TypeOf(clock.New())

// isRealClock reports whether c is the real clock, whose time the SDK
// reads itself: spans then need no timestamps of ours (each would cost an
// allocation), and take them only from another clock, such as a mock.
func isRealClock(c clock.Clock) bool { return reflect.TypeOf(c) == realClockType }

func (c *config) meter() metric.Meter {
	return c.meterProvider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
}

func (c *config) tracer() trace.Tracer {
	return c.tracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))
}

// WithMeterProvider sets the MeterProvider the instruments come from
// (default: the global one, otel.GetMeterProvider(), which forwards to the
// provider installed later with otel.SetMeterProvider). nil means the
// default.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return Option{func(c *config) { c.meterProvider = mp }}
}

// WithTracerProvider sets the TracerProvider the spans come from (default:
// the global one, otel.GetTracerProvider()). nil means the default.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return Option{func(c *config) { c.tracerProvider = tp }}
}

// WithPropagator sets how a span context travels in message headers: a
// Publisher injects with it, a Middleware extracts with it. The default is
// the global propagator (otel.GetTextMapPropagator()) if one has been set
// when the Publisher or Middleware is made, else W3C Trace Context and
// Baggage (the traceparent, tracestate and baggage headers). Both sides
// must use the same. nil means the default.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return Option{func(c *config) { c.propagator = p }}
}

// WithClock sets the clock that times handlers and spans. It must be the
// clock of the broker or source, so that a test on a mock clock measures
// mock time. The default is the source's clock when it reports one (a
// *broker.Subscription does, through Config; a Publisher takes its
// broker's Clock()), else the real clock. nil is invalid.
func WithClock(clk clock.Clock) Option {
	return Option{func(c *config) {
		if clk == nil {
			c.fail(invalid("WithClock: nil clock"))
			return
		}
		c.clock = clk
	}}
}

// WithPublisherAsParent makes each process span a child of the span that
// published its message (the creation context in the message's headers),
// so that producer and consumer show as one trace. By default, as the
// messaging semantic conventions recommend, a process span links to the
// publisher's span instead, and its parent is whatever span the handler's
// context holds (for a poller, Run's context: usually none, so each
// delivery starts a trace of its own). A message that carries no trace
// context gets neither parent nor link from it.
func WithPublisherAsParent() Option {
	return Option{func(c *config) { c.asParent = true }}
}

// WithAttributes adds attrs to every span and every measurement: for
// example the name of a broker when a process has several. They are
// copied.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	attrs = append([]attribute.KeyValue(nil), attrs...)
	return Option{func(c *config) { c.attrs = append(c.attrs, attrs...) }}
}
