package otelleasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/otelleasebus"
	"github.com/leasebus/leasebus/queue"
)

// oneByOne is a backend's publisher with no batch and no clock of its
// own: it keeps what it is given.
type oneByOne struct {
	sent []queue.Message[string]
	fail error
}

func (p *oneByOne) Publish(_ context.Context, topic string, payload string, opts ...queue.PublishOption) (queue.Message[string], error) {
	if p.fail != nil {
		return queue.Message[string]{}, p.fail
	}
	var o queue.PublishOptions
	if err := o.Apply(opts...); err != nil {
		return queue.Message[string]{}, err
	}
	m := queue.Message[string]{Topic: topic, Payload: payload, Headers: queue.NewHeaders(o.Headers), PublishedAt: time.Now()}
	p.sent = append(p.sent, m)
	return m, nil
}

func (p *oneByOne) CheckPublish(string, queue.PublishOptions) error { return nil }

var _ backend.Publisher[string] = (*oneByOne)(nil)

// Over a backend's publisher of any kind, each message carries the
// publish span's context; a batch without a batch of the backend's is
// published one by one, in one span.
func TestPublisherForAnyBackend(t *testing.T) {
	tel := newTelemetry(t)
	be := &oneByOne{}
	pub, err := otelleasebus.NewPublisherFor[string](be, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msg, err := pub.Publish(ctx, "orders", "o-1", queue.WithHeaders(map[string]string{"tenant": "t-7"}))
	if err != nil {
		t.Fatal(err)
	}
	s := spanNamed(t, tel.spans.Ended(), "publish orders")
	if got, want := msg.Headers.Get("traceparent"), traceparent(s.SpanContext()); got != want || msg.Headers.Get("tenant") != "t-7" {
		t.Fatalf("headers %v, want traceparent %q and the caller's tenant", msg.Headers, want)
	}
	msgs, err := pub.PublishBatch(ctx, "audit", []string{"a", "b", "c"})
	if err != nil || len(msgs) != 3 || len(be.sent) != 4 {
		t.Fatalf("batch: %d messages, %d sent, %v", len(msgs), len(be.sent), err)
	}
	bs := spanNamed(t, tel.spans.Ended(), "publish audit")
	for _, m := range msgs {
		if m.Headers.Get("traceparent") != traceparent(bs.SpanContext()) {
			t.Fatalf("a batch's message %v does not carry the batch span's context", m.Headers)
		}
	}
	be.fail = errors.New("backend down")
	if _, err := pub.PublishBatch(ctx, "audit", []string{"d"}); !errors.Is(err, be.fail) {
		t.Fatalf("a failed batch: %v", err)
	}
	if _, err := otelleasebus.NewPublisherFor[string](nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("NewPublisherFor(nil): %v", err)
	}
}
