package wmleasebus_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/wmleasebus"
)

// A Nack fails the lease: the attempt is spent, the message waits out the
// subscription's RetryPolicy backoff on the broker's clock, comes back
// with the same UUID and the next attempt, and after MaxAttempts is
// dead-lettered with the Nack as its last error.
func TestNackSpendsTheAttemptAndWaitsTheBackoff(t *testing.T) {
	b, mock := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{
		ConsumerGroup: "billing",
		SubscribeOptions: []broker.SubscribeOption{
			broker.WithMaxAttempts(3),
			broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Second, Multiplier: 2}),
			broker.WithDeadLetterTopic("orders.dead"),
		},
	})
	dead := brokertest.Subscribe(t, b, "orders.dead", "ops")
	if err := sub.SubscribeInitialize("orders"); err != nil {
		t.Fatal(err)
	}
	sent := publish(t, pub, "orders", "order-1")[0]
	bs := subscription(t, b, "orders", "billing")
	ch := subscribe(t, sub, "orders")

	for attempt, backoff := range []time.Duration{10 * time.Second, 20 * time.Second} {
		m := receive(t, ch)
		d := delivery(t, m)
		if m.UUID != sent.UUID || d.Attempt != attempt+1 || d.MaxAttempts != 3 {
			t.Fatalf("got %q attempt %d of %d, want %q attempt %d of 3", m.UUID, d.Attempt, d.MaxAttempts, sent.UUID, attempt+1)
		}
		m.Nack()
		// The poller polls again only once the Nack is settled: parked, it
		// waits for the backoff's end.
		awaitParked(t, bs, 1)
		mock.Add(backoff - time.Nanosecond)
		checkStats(t, bs, queue.Stats{Delayed: 1, Published: 1, Delivered: uint64(attempt + 1), Redelivered: uint64(attempt)})
		mock.Add(time.Nanosecond)
	}
	m := receive(t, ch)
	if d := delivery(t, m); m.UUID != sent.UUID || d.Attempt != 3 {
		t.Fatalf("got %q attempt %d, want %q attempt 3", m.UUID, d.Attempt, sent.UUID)
	}
	m.Nack() // the last attempt
	dl := receiveDeadLetter(t, dead)
	if dl.Reason != queue.ReasonMaxAttempts || dl.Attempts != 3 || !strings.Contains(dl.LastError, "nacked") ||
		dl.Subscription != "billing" || dl.Message.Headers.Get(wmleasebus.UUIDHeaderKey) != sent.UUID {
		t.Fatalf("dead letter %+v", dl)
	}
	checkStats(t, bs, queue.Stats{Published: 1, Delivered: 3, Redelivered: 2, DeadLettered: 1})
}

// An Ack deletes the message; the next one follows only then.
func TestAckDeletesAndReleasesTheNext(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g"})
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	sent := publish(t, pub, "t", "a", "b")
	bs := subscription(t, b, "t", "g")
	ch := subscribe(t, sub, "t")
	first := receive(t, ch)
	if first.UUID != sent[0].UUID {
		t.Fatalf("first %q, want %q", first.UUID, sent[0].UUID)
	}
	// One at a time: the second stays visible while the first waits.
	checkStats(t, bs, queue.Stats{Visible: 1, InFlight: 1, Published: 2, Delivered: 1})
	select {
	case <-first.Context().Done():
		t.Fatal("message context done before Ack")
	default:
	}
	first.Ack()
	second := receive(t, ch)
	if second.UUID != sent[1].UUID {
		t.Fatalf("second %q, want %q", second.UUID, sent[1].UUID)
	}
	select {
	case <-first.Context().Done():
	case <-time.After(hangGuard):
		t.Fatal("message context not done after Ack")
	}
	second.Ack()
	awaitIdle(t, bs)
	checkStats(t, bs, queue.Stats{Published: 2, Delivered: 2, Acked: 2})
}

// Concurrency n hands out n messages at once, each waiting for its own Ack.
func TestConcurrencyHandsOutSeveral(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g", Concurrency: 2})
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, "t", "a", "b", "c")
	bs := subscription(t, b, "t", "g")
	ch := subscribe(t, sub, "t")
	m1, m2 := receive(t, ch), receive(t, ch)
	checkStats(t, bs, queue.Stats{Visible: 1, InFlight: 2, Published: 3, Delivered: 2})
	m2.Ack()
	m3 := receive(t, ch)
	m1.Ack()
	m3.Ack()
	awaitIdle(t, bs)
	checkStats(t, bs, queue.Stats{Published: 3, Delivered: 3, Acked: 3})
}
