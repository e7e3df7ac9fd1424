package wmleasebus_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/wmleasebus"
)

// hangGuard bounds every wait in this package's own tests, so that a bug
// fails a test rather than hanging it. It is never a timing assertion.
const hangGuard = 10 * time.Second

// newPublisher returns a Publisher on b with cfg, failing the test on error.
func newPublisher(tb testing.TB, b *broker.Broker[[]byte], cfg wmleasebus.PublisherConfig) *wmleasebus.Publisher {
	tb.Helper()
	p, err := wmleasebus.NewPublisher(b, cfg, watermill.NopLogger{})
	if err != nil {
		tb.Fatalf("NewPublisher: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// newSubscriber returns a Subscriber on b with cfg, closed when the test
// ends (before the broker, whose Cleanup was registered first).
func newSubscriber(tb testing.TB, b *broker.Broker[[]byte], cfg wmleasebus.SubscriberConfig) *wmleasebus.Subscriber {
	tb.Helper()
	s, err := wmleasebus.NewSubscriber(b, cfg, watermill.NopLogger{})
	if err != nil {
		tb.Fatalf("NewSubscriber: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Subscriber.Close: %v", err)
		}
	})
	return s
}

// subscribe subscribes s to topic with a background context, failing the
// test on error.
func subscribe(tb testing.TB, s *wmleasebus.Subscriber, topic string) <-chan *message.Message {
	tb.Helper()
	ch, err := s.Subscribe(context.Background(), topic)
	if err != nil {
		tb.Fatalf("Subscribe(%q): %v", topic, err)
	}
	return ch
}

// receive returns the next message of ch, failing the test if ch is
// closed or nothing comes within the hang guard.
func receive(tb testing.TB, ch <-chan *message.Message) *message.Message {
	tb.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			tb.Fatal("channel closed, want a message")
		}
		return m
	case <-time.After(hangGuard):
		tb.Fatal("no message within the hang guard")
	}
	return nil
}

// awaitClosed fails the test unless ch is closed (drained of nothing)
// within the hang guard.
func awaitClosed(tb testing.TB, ch <-chan *message.Message) {
	tb.Helper()
	select {
	case m, ok := <-ch:
		if ok {
			tb.Fatalf("got message %q, want the channel closed", m.UUID)
		}
	case <-time.After(hangGuard):
		tb.Fatal("channel not closed within the hang guard")
	}
}

// publish publishes one message per payload to topic through p and returns
// them.
func publish(tb testing.TB, p *wmleasebus.Publisher, topic string, payloads ...string) []*message.Message {
	tb.Helper()
	var msgs []*message.Message
	for _, pl := range payloads {
		m := message.NewMessage(watermill.NewUUID(), []byte(pl))
		if err := p.Publish(topic, m); err != nil {
			tb.Fatalf("Publish(%q): %v", topic, err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// subscription returns the broker's subscription, failing the test if it
// is missing.
func subscription(tb testing.TB, b *broker.Broker[[]byte], topic, name string) *broker.Subscription[[]byte] {
	tb.Helper()
	s, err := b.Subscription(topic, name)
	if err != nil {
		tb.Fatalf("Subscription(%q, %q): %v", topic, name, err)
	}
	return s
}

// awaitParked waits until n Polls of s are parked on the clock.
func awaitParked(tb testing.TB, s *broker.Subscription[[]byte], n int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := s.AwaitParked(ctx, n); err != nil {
		tb.Fatalf("AwaitParked(%d): %v", n, err)
	}
}

// awaitIdle waits until s holds nothing.
func awaitIdle(tb testing.TB, s *broker.Subscription[[]byte]) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := s.AwaitIdle(ctx); err != nil {
		tb.Fatalf("AwaitIdle: %v (stats %+v)", err, s.Stats())
	}
}

// delivery returns the leasebus delivery of a received message.
func delivery(tb testing.TB, m *message.Message) queue.Delivery[[]byte] {
	tb.Helper()
	d, ok := wmleasebus.DeliveryFromContext(m.Context())
	if !ok {
		tb.Fatalf("message %q: no delivery in its context", m.UUID)
	}
	return d
}

// checkStats compares the counts of s that a test cares about.
func checkStats(tb testing.TB, s *broker.Subscription[[]byte], want queue.Stats) {
	tb.Helper()
	got := s.Stats()
	g := queue.Stats{Visible: got.Visible, Delayed: got.Delayed, InFlight: got.InFlight,
		Published: got.Published, Delivered: got.Delivered, Acked: got.Acked,
		Redelivered: got.Redelivered, DeadLettered: got.DeadLettered}
	if g != want {
		tb.Fatalf("stats:\n got %+v\nwant %+v", g, want)
	}
}

// receiveDeadLetter polls the next message of a dead-letter topic's
// subscription, acks it, and returns the dead letter it carries. (A dead
// letter stored in the broker, by contrast, has no event to wait for.)
func receiveDeadLetter(tb testing.TB, s *broker.Subscription[[]byte]) queue.DeadLetter[[]byte] {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	ds, err := s.Poll(ctx, 1)
	if err != nil {
		tb.Fatalf("no dead letter: %v", err)
	}
	if err := s.Ack(ds[0].LeaseID); err != nil {
		tb.Fatal(err)
	}
	dl, ok := broker.DeadLetterOf(ds[0].Message)
	if !ok {
		tb.Fatalf("not a dead letter: %+v", ds[0].Message)
	}
	return dl
}
