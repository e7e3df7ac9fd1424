package otelleasebus

import (
	"go.opentelemetry.io/otel/propagation"

	"github.com/leasebus/leasebus/queue"
)

// HeadersCarrier adapts a delivered message's read-only headers to
// propagation.TextMapCarrier, to extract a trace context from them:
//
//	ctx = propagator.Extract(ctx, otelleasebus.HeadersCarrier{Headers: d.Headers})
//
// Set does nothing: delivered headers cannot change. (To inject into the
// headers of a message being published, use propagation.MapCarrier on the
// map given to broker.WithHeaders, or a Publisher.)
type HeadersCarrier struct {
	Headers queue.Headers
}

var _ propagation.TextMapCarrier = HeadersCarrier{}

// Get returns the value of key, or "".
func (c HeadersCarrier) Get(key string) string { return c.Headers.Get(key) }

// Set does nothing: a delivered message's headers are read-only.
func (c HeadersCarrier) Set(string, string) {}

// Keys returns the header names, sorted.
func (c HeadersCarrier) Keys() []string {
	keys := make([]string, 0, c.Headers.Len())
	for k := range c.Headers.All() {
		keys = append(keys, k)
	}
	return keys
}
