package wmleasebus

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
)

const hangGuard = 10 * time.Second

// observed returns a Subscriber on b whose runs report every outcome on
// the returned channel (the test must drain what it waits for).
func observed(t *testing.T, b *broker.Broker[[]byte], cfg SubscriberConfig) (*Subscriber, <-chan poller.Event[[]byte]) {
	t.Helper()
	s, err := NewSubscriber(b, cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan poller.Event[[]byte], 16)
	s.observe = func(e poller.Event[[]byte]) { events <- e }
	t.Cleanup(func() { s.Close() })
	return s, events
}

func awaitOutcome(t *testing.T, events <-chan poller.Event[[]byte], want poller.Outcome) poller.Event[[]byte] {
	t.Helper()
	select {
	case e := <-events:
		if e.Outcome != want {
			t.Fatalf("outcome %v (%v), want %v", e.Outcome, e.Err, want)
		}
		return e
	case <-time.After(hangGuard):
		t.Fatalf("no %v outcome within the hang guard", want)
	}
	return poller.Event[[]byte]{}
}

func receiveOne(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(hangGuard):
		t.Fatal("no message within the hang guard")
	}
	return nil
}

// While watermill holds a message, its lease is kept on the broker's
// clock: taken for MaxExtension (an hour) at once, it outlives its
// visibility timeout many times over, and is not delivered again.
func TestLeaseKeptWhileTheHandlerHoldsIt(t *testing.T) {
	b, mock := brokertest.New[[]byte](t)
	s, events := observed(t, b, SubscriberConfig{ConsumerGroup: "g",
		SubscribeOptions: []broker.SubscribeOption{broker.WithVisibilityTimeout(30 * time.Second)}})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(context.Background(), "t", []byte("x")); err != nil {
		t.Fatal(err)
	}
	m := receiveOne(t, ch)
	d, _ := DeliveryFromContext(m.Context())
	if got := d.Deadline.Sub(brokertest.Epoch); got != time.Hour {
		t.Fatalf("deadline %v after the epoch, want 1h (MaxExtension)", got)
	}
	mock.Add(time.Hour - time.Second) // 119 visibility timeouts, in one move
	bs, _ := b.Subscription("t", "g")
	if st := bs.Stats(); st.InFlight != 1 || st.Visible != 0 || st.Redelivered != 0 {
		t.Fatalf("stats %+v, want the message still in flight", st)
	}
	m.Ack()
	awaitOutcome(t, events, poller.OutcomeAcked)
	if st := bs.Stats(); st.Acked != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v after Ack", st)
	}
}

// With poller.NoExtension the lease lapses at its deadline while watermill still
// holds the message: it is visible again, and the next consumer gets it
// with an attempt spent.
func TestNoExtensionLetsTheLeaseLapse(t *testing.T) {
	b, mock := brokertest.New[[]byte](t)
	s, _ := observed(t, b, SubscriberConfig{ConsumerGroup: "g", MaxExtension: poller.NoExtension,
		SubscribeOptions: []broker.SubscribeOption{broker.WithVisibilityTimeout(30 * time.Second)}})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(context.Background(), "t", []byte("x")); err != nil {
		t.Fatal(err)
	}
	m := receiveOne(t, ch)
	bs, _ := b.Subscription("t", "g")
	mock.Add(30*time.Second - time.Nanosecond)
	if st := bs.Stats(); st.InFlight != 1 || st.Visible != 0 {
		t.Fatalf("stats %+v, want the lease live until its deadline", st)
	}
	mock.Add(time.Nanosecond)
	if st := bs.Stats(); st.InFlight != 0 || st.Visible != 1 {
		t.Fatalf("stats %+v, want the lease lapsed", st)
	}
	if err := s.Close(); err != nil { // its release finds the lease gone: changes nothing
		t.Fatal(err)
	}
	next, _ := observed(t, b, SubscriberConfig{ConsumerGroup: "g"})
	nch, err := next.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	again := receiveOne(t, nch)
	if d, _ := DeliveryFromContext(again.Context()); again.UUID != m.UUID || d.Attempt != 2 {
		t.Fatalf("got %q attempt %d, want %q attempt 2", again.UUID, d.Attempt, m.UUID)
	}
	again.Ack()
}

// MaxExtension bounds the hold: past it the lease lapses, and the message
// is delivered again with its attempt spent.
func TestMaxExtensionBoundsTheHold(t *testing.T) {
	b, mock := brokertest.New[[]byte](t)
	s, events := observed(t, b, SubscriberConfig{ConsumerGroup: "g", MaxExtension: 40 * time.Second, Concurrency: 2,
		SubscribeOptions: []broker.SubscribeOption{broker.WithVisibilityTimeout(30 * time.Second)}})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(context.Background(), "t", []byte("x")); err != nil {
		t.Fatal(err)
	}
	first := receiveOne(t, ch)
	bs, _ := b.Subscription("t", "g")
	awaitParked := func() { // the second worker's Poll, before the clock moves
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		if err := bs.AwaitParked(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	awaitParked()
	mock.Add(40*time.Second - time.Nanosecond) // held to the limit (40s), past its visibility timeout (30s)
	if st := bs.Stats(); st.InFlight != 1 || st.Redelivered != 0 {
		t.Fatalf("stats %+v, want the message held", st)
	}
	mock.Add(time.Nanosecond)
	awaitOutcome(t, events, poller.OutcomeExtensionStopped)
	again := receiveOne(t, ch) // the second worker gets it again
	if d, _ := DeliveryFromContext(again.Context()); again.UUID != first.UUID || d.Attempt != 2 {
		t.Fatalf("got %q attempt %d, want %q attempt 2", again.UUID, d.Attempt, first.UUID)
	}
	again.Ack()
	awaitOutcome(t, events, poller.OutcomeAcked)
	first.Ack() // its lease was superseded: changes nothing
	if e := awaitOutcome(t, events, poller.OutcomeSettleFailed); e.SourceErr == nil {
		t.Fatal("the superseded Ack succeeded")
	}
}
