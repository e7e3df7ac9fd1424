package wmleasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/wmleasebus"
)

// Close releases what the Subscribe holds, the message handed out but not
// settled included: visible again at once, in its place, no attempt spent.
// The channel is closed and no goroutine is left (goleak, in TestMain).
func TestCloseReleasesWhatItHolds(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g", BatchSize: 3})
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	sent := publish(t, pub, "t", "a", "b", "c")
	bs := subscription(t, b, "t", "g")
	ch := subscribe(t, sub, "t")
	held := receive(t, ch)
	checkStats(t, bs, queue.Stats{InFlight: 3, Published: 3, Delivered: 3}) // prefetched
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, ch)
	select {
	case <-held.Context().Done():
	default:
		t.Fatal("the unsettled message's context is not done after Close")
	}
	checkStats(t, bs, queue.Stats{Visible: 3, Published: 3, Delivered: 3})
	held.Ack() // too late: lost, as watermill's Ack has no way back now
	if err := sub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	next := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g"})
	nch := subscribe(t, next, "t")
	for i := range sent {
		m := receive(t, nch)
		if d := delivery(t, m); m.UUID != sent[i].UUID || d.Attempt != 1 {
			t.Fatalf("got %q attempt %d, want %q attempt 1", m.UUID, d.Attempt, sent[i].UUID)
		}
		m.Ack()
	}
	awaitIdle(t, bs)
	checkStats(t, bs, queue.Stats{Published: 3, Delivered: 6, Acked: 3})
}

// Cancelling Subscribe's context ends that Subscribe alone: its channel
// is closed, its message released; the Subscriber goes on.
func TestSubscribeContextEndsTheSubscribe(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g"})
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	sent := publish(t, pub, "t", "a")[0]
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "value"))
	ch, err := sub.Subscribe(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, ch)
	if m.Context().Value(key{}) != "value" {
		t.Fatal("the message's context does not carry Subscribe's values")
	}
	cancel()
	awaitClosed(t, ch)
	<-m.Context().Done() // already done: the channel closes after
	bs := subscription(t, b, "t", "g")
	checkStats(t, bs, queue.Stats{Visible: 1, Published: 1, Delivered: 1})

	again := receive(t, subscribe(t, sub, "t"))
	if again.UUID != sent.UUID || delivery(t, again).Attempt != 1 {
		t.Fatalf("got %q attempt %d", again.UUID, delivery(t, again).Attempt)
	}
	again.Ack()
	awaitIdle(t, bs)
}

// A Subscribe whose context is already done gets a channel that closes.
func TestSubscribeWithDoneContext(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ch, err := sub.Subscribe(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, ch)
	if names, _ := b.Subscriptions("t"); len(names) != 0 {
		t.Fatalf("subscriptions %v, want none", names)
	}
}

// When the subscription goes away under a Subscribe (Unsubscribe, the
// broker's Close), its channel is closed.
func TestSubscriptionGoneClosesTheChannel(t *testing.T) {
	t.Run("Unsubscribe", func(t *testing.T) {
		b, _ := brokertest.New[[]byte](t)
		pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
		sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g"})
		ch := subscribe(t, sub, "t")
		publish(t, pub, "t", "a")
		m := receive(t, ch)
		if err := b.Unsubscribe("t", "g"); err != nil {
			t.Fatal(err)
		}
		awaitClosed(t, ch)
		<-m.Context().Done()
	})
	t.Run("broker Close", func(t *testing.T) {
		b, _ := brokertest.New[[]byte](t)
		sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g"})
		own := newSubscriber(t, b, wmleasebus.SubscriberConfig{})
		ch1, ch2 := subscribe(t, sub, "t"), subscribe(t, own, "t")
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		awaitClosed(t, ch1)
		awaitClosed(t, ch2)
		if _, err := sub.Subscribe(context.Background(), "t"); !errors.Is(err, queue.ErrClosed) {
			t.Fatalf("Subscribe on a closed broker: %v, want queue.ErrClosed", err)
		}
		if err := newPublisher(t, b, wmleasebus.PublisherConfig{}).Publish("t", message.NewMessage("1", nil)); !errors.Is(err, queue.ErrClosed) {
			t.Fatalf("Publish on a closed broker: %v, want queue.ErrClosed", err)
		}
	})
}

// After Close, Subscribe and SubscribeInitialize return
// ErrSubscriberClosed, Publish ErrPublisherClosed; Close twice is nil.
func TestClosedPublisherAndSubscriber(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{})
	for range 2 {
		if err := pub.Close(); err != nil {
			t.Fatal(err)
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Publish("t", message.NewMessage("1", nil)); !errors.Is(err, wmleasebus.ErrPublisherClosed) {
		t.Fatalf("Publish: %v, want ErrPublisherClosed", err)
	}
	if _, err := sub.Subscribe(context.Background(), "t"); !errors.Is(err, wmleasebus.ErrSubscriberClosed) {
		t.Fatalf("Subscribe: %v, want ErrSubscriberClosed", err)
	}
	if err := sub.SubscribeInitialize("t"); !errors.Is(err, wmleasebus.ErrSubscriberClosed) {
		t.Fatalf("SubscribeInitialize: %v, want ErrSubscriberClosed", err)
	}
	if len(b.Topics()) != 0 {
		t.Fatalf("topics %v, want none", b.Topics())
	}
}

// Close waits for every Subscribe, even one whose consumer never reads.
func TestCloseWhileConsumersAreStuck(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g", Concurrency: 4, BatchSize: 8})
	chans := make([]<-chan *message.Message, 3)
	for i := range chans {
		chans[i] = subscribe(t, sub, "t")
	}
	publish(t, pub, "t", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10")
	select { // one read, never settled; the rest wait on sends
	case <-chans[0]:
	case <-chans[1]:
	case <-chans[2]:
	case <-time.After(hangGuard):
		t.Fatal("no message within the hang guard")
	}
	done := make(chan error)
	go func() { done <- sub.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Close did not return")
	}
	for _, ch := range chans {
		awaitClosed(t, ch)
	}
	checkStats(t, subscription(t, b, "t", "g"), queue.Stats{Visible: 10, Published: 10, Delivered: subscription(t, b, "t", "g").Stats().Delivered})
}

// A Subscribe that ends hands its message back once: the poller under it
// does not lease it again while it stops. (A handler sees the end a moment
// before the poller does; leasing in that moment spun lease, release,
// lease, hundreds of times under -race.)
func TestEndingSubscribeDoesNotLeaseAgain(t *testing.T) {
	for range 100 {
		b, _ := brokertest.New[[]byte](t)
		pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
		sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g"})
		if err := sub.SubscribeInitialize("t"); err != nil {
			t.Fatal(err)
		}
		publish(t, pub, "t", "a")
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := sub.Subscribe(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		receive(t, ch)
		cancel()
		awaitClosed(t, ch)
		checkStats(t, subscription(t, b, "t", "g"), queue.Stats{Visible: 1, Published: 1, Delivered: 1})
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
}
