package leasebuspubsub

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/pubsub"
	"gocloud.dev/pubsub/driver"
	"gocloud.dev/pubsub/drivertest"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// harness runs gocloud's conformance tests on a broker of its own, on the
// real clock (the suite waits in real time).
type harness struct {
	b *broker.Broker[[]byte]
	n atomic.Int64 // names topics and subscriptions
}

func newHarness(_ context.Context, t *testing.T) (drivertest.Harness, error) {
	b, err := broker.New[[]byte](
		// TestNack waits for nacked messages to come back: a short
		// backoff, which the driver's Nack (Fail) does wait out.
		broker.WithSubscriptionDefaults(broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond})))
	if err != nil {
		return nil, err
	}
	return &harness{b: b}, nil
}

func (h *harness) name(kind string) string { return fmt.Sprintf("%s-%d", kind, h.n.Add(1)) }

func (h *harness) CreateTopic(_ context.Context, _ string) (driver.Topic, func(), error) {
	name := h.name("topic")
	if err := h.b.CreateTopic(name); err != nil {
		return nil, nil, err
	}
	dt, err := openTopic(h.b, name)
	if err != nil {
		return nil, nil, err
	}
	return dt, func() { _ = h.b.DeleteTopic(name) }, nil
}

func (h *harness) MakeNonexistentTopic(context.Context) (driver.Topic, error) {
	return openTopic(h.b, "nonexistent-topic")
}

func (h *harness) CreateSubscription(_ context.Context, dt driver.Topic, _ string) (driver.Subscription, func(), error) {
	topic := dt.(*topic).name
	name := h.name("sub")
	if _, err := h.b.Subscribe(topic, name); err != nil {
		return nil, nil, err
	}
	ds, err := openSubscription(h.b, topic, name, &SubscriptionOptions{})
	if err != nil {
		return nil, nil, err
	}
	// The suite drives some driver subscriptions directly and never closes
	// them (gocloud's Shutdown closes the others, and Close twice is fine):
	// closing it here stops its lease extension, as Shutdown would.
	return ds, func() { _ = ds.Close(); _ = h.b.Unsubscribe(topic, name) }, nil
}

func (h *harness) MakeNonexistentSubscription(context.Context) (driver.Subscription, func(), error) {
	ds, err := openSubscription(h.b, "nonexistent-topic", "nonexistent-subscription", &SubscriptionOptions{})
	return ds, func() {}, err
}

func (h *harness) Close() { _ = h.b.Close() }

// MaxBatchSizes: no limit on SendBatch, nor on SendAcks/SendNacks.
func (h *harness) MaxBatchSizes() (int, int) { return 0, 0 }

// SupportsMultipleSubscriptions: every subscription of a topic gets every
// message.
func (h *harness) SupportsMultipleSubscriptions() bool { return true }

func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, newHarness, []drivertest.AsTest{asTest{}})
}

// asTest checks every type As exposes.
type asTest struct{}

func (asTest) Name() string { return "leasebus types" }

func (asTest) TopicCheck(top *pubsub.Topic) error {
	var b *broker.Broker[[]byte]
	if !top.As(&b) || b == nil {
		return errors.New("Topic.As(*broker.Broker[[]byte]) failed")
	}
	var s *broker.Subscription[[]byte]
	if top.As(&s) {
		return errors.New("Topic.As(*broker.Subscription[[]byte]) succeeded")
	}
	return nil
}

func (asTest) SubscriptionCheck(s *pubsub.Subscription) error {
	var sub *broker.Subscription[[]byte]
	if !s.As(&sub) || sub == nil {
		return errors.New("Subscription.As(*broker.Subscription[[]byte]) failed")
	}
	var b *broker.Broker[[]byte]
	if !s.As(&b) || b == nil {
		return errors.New("Subscription.As(*broker.Broker[[]byte]) failed")
	}
	var d queue.Delivery[[]byte]
	if s.As(&d) {
		return errors.New("Subscription.As(queue.Delivery[[]byte]) succeeded")
	}
	return nil
}

func (asTest) TopicErrorCheck(top *pubsub.Topic, err error) error {
	if !errors.Is(err, broker.ErrTopicNotFound) {
		return fmt.Errorf("errors.Is(%v, broker.ErrTopicNotFound) is false", err)
	}
	var full *queue.FullError
	if top.ErrorAs(err, &full) {
		return errors.New("Topic.ErrorAs(*queue.FullError) succeeded on a missing topic")
	}
	var n int
	if top.ErrorAs(err, &n) { // errors.As would panic on this target
		return errors.New("Topic.ErrorAs(*int) succeeded")
	}
	var e error
	if !top.ErrorAs(err, &e) || !errors.Is(e, broker.ErrTopicNotFound) {
		return fmt.Errorf("Topic.ErrorAs(*error) = %v, want the leasebus error", e)
	}
	return nil
}

func (asTest) SubscriptionErrorCheck(s *pubsub.Subscription, err error) error {
	if !errors.Is(err, broker.ErrTopicNotFound) {
		return fmt.Errorf("errors.Is(%v, broker.ErrTopicNotFound) is false", err)
	}
	var e error
	if !s.ErrorAs(err, &e) || !errors.Is(e, broker.ErrTopicNotFound) {
		return fmt.Errorf("Subscription.ErrorAs(*error) = %v, want the leasebus error", e)
	}
	return nil
}

func (asTest) MessageCheck(m *pubsub.Message) error {
	var d queue.Delivery[[]byte]
	if !m.As(&d) {
		return errors.New("Message.As(queue.Delivery[[]byte]) failed")
	}
	if d.Attempt != 1 || d.LeaseID.IsZero() || string(d.Payload) != string(m.Body) || d.ID.String() != m.LoggableID {
		return fmt.Errorf("Message.As: delivery %+v does not describe message %q (%s)", d, m.Body, m.LoggableID)
	}
	if d.Priority != queue.PriorityHigh {
		return fmt.Errorf("delivery priority %v, want the %v BeforeSend set", d.Priority, queue.PriorityHigh)
	}
	var sub *broker.Subscription[[]byte]
	if !m.As(&sub) || sub == nil {
		return errors.New("Message.As(*broker.Subscription[[]byte]) failed")
	}
	var b *broker.Broker[[]byte]
	if m.As(&b) {
		return errors.New("Message.As(*broker.Broker[[]byte]) succeeded")
	}
	return nil
}

func (asTest) BeforeSend(as func(any) bool) error {
	var opts *[]broker.PublishOption
	if !as(&opts) || opts == nil {
		return errors.New("BeforeSend As(*[]broker.PublishOption) failed")
	}
	*opts = append(*opts, broker.WithPriority(queue.PriorityHigh))
	var m queue.Message[[]byte]
	if as(&m) {
		return errors.New("BeforeSend As(queue.Message[[]byte]) succeeded before the send")
	}
	return nil
}

func (asTest) AfterSend(as func(any) bool) error {
	var m queue.Message[[]byte]
	if !as(&m) {
		return errors.New("AfterSend As(queue.Message[[]byte]) failed")
	}
	if m.Priority != queue.PriorityHigh || string(m.Payload) != "x" || m.PublishedAt.IsZero() {
		return fmt.Errorf("AfterSend: stored message %+v, want x at priority high", m)
	}
	var opts *[]broker.PublishOption
	if as(&opts) {
		return errors.New("AfterSend As(*[]broker.PublishOption) succeeded after the send")
	}
	return nil
}
