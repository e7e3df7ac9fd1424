package wmleasebus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/wmleasebus"
)

// A message comes back with its UUID (any string, not only a UUID), its
// Metadata (empty values included) and its Payload; the payload is copied
// on the way in and on the way out, so neither the publisher nor a
// consumer can change what another subscription gets.
func TestMetadataUUIDAndPayloadRoundTrip(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	s1 := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "one"})
	s2 := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "two"})
	for _, s := range []*wmleasebus.Subscriber{s1, s2} {
		if err := s.SubscribeInitialize("t"); err != nil {
			t.Fatal(err)
		}
	}
	sent := message.NewMessage("not a uuid, but watermill's UUID is any string", []byte("payload"))
	sent.Metadata.Set("trace", "abc")
	sent.Metadata.Set("empty", "")
	sent.Metadata.Set("leasebus-dead-letter-reason", "kept as any other key")
	want := sent.Copy() // Copy shares the payload's bytes: give want its own
	want.Payload = []byte("payload")
	if err := pub.Publish("t", sent); err != nil {
		t.Fatal(err)
	}
	sent.Payload[0] = 'X' // the publisher's buffer, reused

	got := receive(t, subscribe(t, s1, "t"))
	if !got.Equals(want) {
		t.Fatalf("got %q %v %q, want %q %v %q", got.UUID, got.Metadata, got.Payload, want.UUID, want.Metadata, want.Payload)
	}
	got.Payload[1] = 'Y' // a consumer that decodes in place
	got.Ack()
	other := receive(t, subscribe(t, s2, "t"))
	if !other.Equals(want) {
		t.Fatalf("the other group got %q %v %q, want %q %v %q", other.UUID, other.Metadata, other.Payload, want.UUID, want.Metadata, want.Payload)
	}
	other.Ack()

	d := delivery(t, other)
	if d.Topic != "t" || d.Headers.Get(wmleasebus.UUIDHeaderKey) != want.UUID || string(d.Payload) != "payload" {
		t.Fatalf("delivery %+v", d)
	}
}

// A message published to the broker directly (not through watermill) has
// no UUID header: it gets the leasebus message ID as its UUID, and its
// headers as Metadata.
func TestForeignMessageGetsTheLeasebusID(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g"})
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	sent, err := b.Publish(context.Background(), "t", []byte("raw"), broker.WithHeaders(map[string]string{"k": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, subscribe(t, sub, "t"))
	got.Ack()
	if got.UUID != sent.ID.String() || len(got.Metadata) != 1 || got.Metadata.Get("k") != "v" || string(got.Payload) != "raw" {
		t.Fatalf("got %q %v %q, want %q map[k:v] raw", got.UUID, got.Metadata, got.Payload, sent.ID)
	}
}

// Metadata under UUIDHeaderKey would be lost on the way: Publish refuses
// it and publishes nothing from that message on.
func TestReservedMetadataRefused(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g"})
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	ok := message.NewMessage("1", []byte("x"))
	bad := message.NewMessage("2", []byte("x"))
	bad.Metadata.Set(wmleasebus.UUIDHeaderKey, "spoofed")
	after := message.NewMessage("3", []byte("x"))
	err := pub.Publish("t", ok, bad, after)
	if !errors.Is(err, wmleasebus.ErrReservedMetadata) {
		t.Fatalf("Publish: %v, want ErrReservedMetadata", err)
	}
	checkStats(t, subscription(t, b, "t", "g"), queue.Stats{Visible: 1, Published: 1})
}

// The members of one consumer group compete: a message leased by one is
// not handed to another. Another group gets every message.
func TestConsumerGroupMembersCompeteGroupsFanOut(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	a := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "workers"})
	c := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "workers"})
	audit := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "audit"})
	for _, s := range []*wmleasebus.Subscriber{a, audit} {
		if err := s.SubscribeInitialize("jobs"); err != nil {
			t.Fatal(err)
		}
	}
	sent := publish(t, pub, "jobs", "1", "2")
	fromA := receive(t, subscribe(t, a, "jobs")) // a holds the first...
	fromC := receive(t, subscribe(t, c, "jobs")) // ...so c gets the second
	if fromA.UUID != sent[0].UUID || fromC.UUID != sent[1].UUID {
		t.Fatalf("a got %q, c got %q; want %q and %q", fromA.UUID, fromC.UUID, sent[0].UUID, sent[1].UUID)
	}
	fromA.Ack()
	fromC.Ack()
	workers := subscription(t, b, "jobs", "workers")
	awaitIdle(t, workers)
	checkStats(t, workers, queue.Stats{Published: 2, Delivered: 2, Acked: 2})

	ach := subscribe(t, audit, "jobs")
	for i := range sent {
		m := receive(t, ach)
		if m.UUID != sent[i].UUID {
			t.Fatalf("audit got %q, want %q", m.UUID, sent[i].UUID)
		}
		m.Ack()
	}
}

// Without a consumer group every Subscribe has a subscription of its
// own: it gets what is published while it lasts (or since
// SubscribeInitialize), and it is removed when it ends.
func TestWithoutGroupEachSubscribeFansOut(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	early := newSubscriber(t, b, wmleasebus.SubscriberConfig{})
	late := newSubscriber(t, b, wmleasebus.SubscriberConfig{})
	if err := early.SubscribeInitialize("news"); err != nil {
		t.Fatal(err)
	}
	if err := early.SubscribeInitialize("news"); err != nil { // again: the same one
		t.Fatal(err)
	}
	if names, _ := b.Subscriptions("news"); len(names) != 1 {
		t.Fatalf("subscriptions %v after SubscribeInitialize twice, want one", names)
	}
	before := publish(t, pub, "news", "before")[0]
	ech := subscribe(t, early, "news") // takes the initialized one
	lch := subscribe(t, late, "news")  // a new one: "before" is not in it
	ctx, cancel := context.WithCancel(context.Background())
	again, err := early.Subscribe(ctx, "news") // a second of early's own
	if err != nil {
		t.Fatal(err)
	}
	if names, _ := b.Subscriptions("news"); len(names) != 3 {
		t.Fatalf("subscriptions %v, want three", names)
	}
	after := publish(t, pub, "news", "after")[0]

	for i, want := range []string{before.UUID, after.UUID} {
		if m := receive(t, ech); m.UUID != want {
			t.Fatalf("early's message %d is %q, want %q", i, m.UUID, want)
		} else {
			m.Ack()
		}
	}
	for _, ch := range []<-chan *message.Message{lch, again} {
		if m := receive(t, ch); m.UUID != after.UUID {
			t.Fatalf("got %q, want only %q", m.UUID, after.UUID)
		} else {
			m.Ack()
		}
	}
	cancel()
	awaitClosed(t, again)
	if names, _ := b.Subscriptions("news"); len(names) != 2 {
		t.Fatalf("subscriptions %v after a Subscribe ended, want two", names)
	}
	if err := early.Close(); err != nil {
		t.Fatal(err)
	}
	if err := late.Close(); err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, ech)
	awaitClosed(t, lch)
	if names, _ := b.Subscriptions("news"); len(names) != 0 {
		t.Fatalf("subscriptions %v after Close, want none", names)
	}
}

// SubscribeInitialize without a Subscribe leaves a subscription of the
// Subscriber's own waiting; Close removes it.
func TestCloseRemovesAnInitializedSubscriptionNotTaken(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{})
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	if names, _ := b.Subscriptions("t"); len(names) != 1 {
		t.Fatalf("subscriptions %v, want one", names)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if names, _ := b.Subscriptions("t"); len(names) != 0 {
		t.Fatalf("subscriptions %v after Close, want none", names)
	}
}
