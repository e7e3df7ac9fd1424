package wmleasebus_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/wmleasebus"
)

// On a broker from broker.Open, a consumer group's messages survive the
// process: published, the broker closed (as a crash would leave them, or a
// restart), the directory opened again, a new Subscriber of the group gets
// them, UUID, Metadata and Payload intact, in order. The subscription
// comes back with the options it was created with.
func TestDurableRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() *broker.Broker[[]byte] {
		b, err := broker.Open[[]byte](dir, queue.BytesCodec())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := open()
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "billing",
		SubscribeOptions: []broker.SubscribeOption{broker.WithMaxAttempts(9), broker.WithVisibilityTimeout(time.Minute)}})
	if err := sub.SubscribeInitialize("orders"); err != nil {
		t.Fatal(err)
	}
	var sent []*message.Message
	for _, p := range []string{"a", "b", "c"} {
		m := message.NewMessage("id-"+p, []byte(p))
		m.Metadata.Set("customer", "c-"+p)
		if err := pub.Publish("orders", m); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m)
	}
	// One is being handled when the process goes away: it comes back
	// with its attempt counted, as after an expired lease.
	inFlight := receive(t, subscribe(t, sub, "orders"))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}

	b = open()
	defer b.Close()
	again := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "billing"})
	ch := subscribe(t, again, "orders")
	for i, want := range sent {
		m := receive(t, ch)
		if !m.Equals(want) {
			t.Fatalf("message %d: got %q %v %q, want %q %v %q", i, m.UUID, m.Metadata, m.Payload, want.UUID, want.Metadata, want.Payload)
		}
		d := delivery(t, m)
		if wantAttempt := map[bool]int{true: 2, false: 1}[m.UUID == inFlight.UUID]; d.Attempt != wantAttempt || d.MaxAttempts != 9 {
			t.Fatalf("message %q: attempt %d of %d, want %d of 9", m.UUID, d.Attempt, d.MaxAttempts, wantAttempt)
		}
		m.Ack()
	}
	if got := subscription(t, b, "orders", "billing").Config().VisibilityTimeout; got != time.Minute {
		t.Fatalf("visibility %v, want the recorded 1m", got)
	}
}
