package wmleasebus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/wmleasebus"
)

func TestBadConfig(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	for _, tc := range []struct {
		name string
		cfg  wmleasebus.SubscriberConfig
		want string // in the error's text
	}{
		{"negative Concurrency", wmleasebus.SubscriberConfig{Concurrency: -1}, "Concurrency -1"},
		{"negative BatchSize", wmleasebus.SubscriberConfig{BatchSize: -2}, "BatchSize -2"},
		{"negative MaxExtension", wmleasebus.SubscriberConfig{MaxExtension: -time.Second}, "MaxExtension -1s"},
		{"group with a space", wmleasebus.SubscriberConfig{ConsumerGroup: "my group"}, "space or control"},
		{"group with a control character", wmleasebus.SubscriberConfig{ConsumerGroup: "a\x00b"}, "space or control"},
		{"group too long", wmleasebus.SubscriberConfig{ConsumerGroup: strings.Repeat("g", 256)}, "at most 255"},
		{"group not UTF-8", wmleasebus.SubscriberConfig{ConsumerGroup: "\xff"}, "not UTF-8"},
		{"no subscription creation without a group", wmleasebus.SubscriberConfig{DoNotCreateSubscriptionIfMissing: true}, "needs a ConsumerGroup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, wmleasebus.ErrInvalidConfig) || !errors.Is(err, queue.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want ErrInvalidConfig and queue.ErrInvalidArgument saying %q", err, tc.want)
			}
			s, err2 := wmleasebus.NewSubscriber(b, tc.cfg, nil)
			if s != nil || err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("NewSubscriber: %v, %v; want nil, %v", s, err2, err)
			}
		})
	}
	// Every error at once.
	err := wmleasebus.SubscriberConfig{Concurrency: -1, BatchSize: -1}.Validate()
	if !strings.Contains(err.Error(), "Concurrency") || !strings.Contains(err.Error(), "BatchSize") {
		t.Fatalf("Validate: %v, want both fields named", err)
	}
	if _, err := wmleasebus.NewSubscriber(nil, wmleasebus.SubscriberConfig{}, nil); !errors.Is(err, wmleasebus.ErrInvalidConfig) {
		t.Fatalf("NewSubscriber(nil broker): %v", err)
	}
	if _, err := wmleasebus.NewPublisher(nil, wmleasebus.PublisherConfig{}, nil); !errors.Is(err, wmleasebus.ErrInvalidConfig) {
		t.Fatalf("NewPublisher(nil broker): %v", err)
	}
	if err := (wmleasebus.SubscriberConfig{}).Validate(); err != nil {
		t.Fatalf("the zero config: %v", err)
	}
	// An option the broker refuses is its error, at the first Subscribe.
	s := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g",
		SubscribeOptions: []broker.SubscribeOption{broker.WithMaxAttempts(0)}})
	if _, err := s.Subscribe(context.Background(), "t"); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("Subscribe with WithMaxAttempts(0): %v", err)
	}
}

// A watermill topic that is not a leasebus topic name is refused, by
// Publish, Subscribe and SubscribeInitialize, and nothing is created.
func TestInvalidTopicRefused(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	group := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g"})
	own := newSubscriber(t, b, wmleasebus.SubscriberConfig{})
	strict := newSubscriber(t, b, wmleasebus.SubscriberConfig{DoNotCreateTopicIfMissing: true})
	strictPub := newPublisher(t, b, wmleasebus.PublisherConfig{DoNotCreateTopicIfMissing: true})
	for _, topic := range []string{"", "orders created", "orders.*", "orders.>", "#", "a..b", ".a", "tab\there"} {
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, wmleasebus.ErrInvalidTopic) || !errors.Is(err, queue.ErrInvalidArgument) {
				t.Errorf("%s(%q): %v, want ErrInvalidTopic", what, topic, err)
			}
		}
		check("Publish", pub.Publish(topic, message.NewMessage("1", nil)))
		check("strict Publish", strictPub.Publish(topic, message.NewMessage("1", nil)))
		for _, s := range []*wmleasebus.Subscriber{group, own, strict} {
			_, err := s.Subscribe(context.Background(), topic)
			check("Subscribe", err)
			check("SubscribeInitialize", s.SubscribeInitialize(topic))
		}
	}
	if len(b.Topics()) != 0 {
		t.Fatalf("topics %q, want none", b.Topics())
	}
	// Anything else goes: dashes, slashes, colons, dots between segments.
	for _, topic := range []string{"orders-created", "svc/orders:v1", "orders.eu.created", "Заказы"} {
		if err := pub.Publish(topic, message.NewMessage("1", nil)); err != nil {
			t.Errorf("Publish(%q): %v", topic, err)
		}
	}
}

func TestDoNotCreate(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{DoNotCreateTopicIfMissing: true})
	if err := pub.Publish("t", message.NewMessage("1", nil)); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Fatalf("Publish: %v, want broker.ErrTopicNotFound", err)
	}
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{DoNotCreateTopicIfMissing: true, ConsumerGroup: "g"})
	if _, err := sub.Subscribe(context.Background(), "t"); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Fatalf("Subscribe: %v, want broker.ErrTopicNotFound", err)
	}
	if err := sub.SubscribeInitialize("t"); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Fatalf("SubscribeInitialize: %v, want broker.ErrTopicNotFound", err)
	}
	if len(b.Topics()) != 0 {
		t.Fatalf("topics %q, want none", b.Topics())
	}

	if err := b.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	noSub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g", DoNotCreateSubscriptionIfMissing: true})
	if _, err := noSub.Subscribe(context.Background(), "t"); !errors.Is(err, broker.ErrSubscriptionNotFound) {
		t.Fatalf("Subscribe: %v, want broker.ErrSubscriptionNotFound", err)
	}
	if err := noSub.SubscribeInitialize("t"); !errors.Is(err, broker.ErrSubscriptionNotFound) {
		t.Fatalf("SubscribeInitialize: %v, want broker.ErrSubscriptionNotFound", err)
	}
	// Made by the application, with its options: taken as it is.
	if _, err := b.Subscribe("t", "g", broker.WithMaxAttempts(7)); err != nil {
		t.Fatal(err)
	}
	ch := subscribe(t, noSub, "t")
	if err := pub.Publish("t", message.NewMessage("1", nil)); err != nil {
		t.Fatal(err)
	}
	m := receive(t, ch)
	if d := delivery(t, m); d.MaxAttempts != 7 {
		t.Fatalf("MaxAttempts %d, want the subscription's 7", d.MaxAttempts)
	}
	m.Ack()
}

// An existing subscription keeps its options; SubscribeOptions apply to
// one the Subscriber creates.
func TestSubscribeOptionsApplyWhenCreating(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	mk := func(n int) *wmleasebus.Subscriber {
		return newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g",
			SubscribeOptions: []broker.SubscribeOption{broker.WithMaxAttempts(n)}})
	}
	if err := mk(3).SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	if err := mk(9).SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	if got := subscription(t, b, "t", "g").Config().MaxAttempts; got != 3 {
		t.Fatalf("MaxAttempts %d, want the first Subscriber's 3", got)
	}
}

// Publish creates the topic again if it was deleted since.
func TestPublishAfterDeleteTopic(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	pub := newPublisher(t, b, wmleasebus.PublisherConfig{})
	publish(t, pub, "t", "a")
	if err := b.DeleteTopic("t"); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, "t", "b")
	if got := b.Topics(); len(got) != 1 || got[0] != "t" {
		t.Fatalf("topics %q", got)
	}
	if err := pub.Publish("t", nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("Publish(nil message): %v", err)
	}
}

// A nil context is an invalid argument, not a panic.
func TestSubscribeNilContext(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{})
	//lint:ignore SA1012 a nil context is what is tested
	if _, err := sub.Subscribe(nil, "t"); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("Subscribe(nil, ...): %v, want queue.ErrInvalidArgument", err)
	}
}

// nothing returns neither a message nor an error.
type nothing struct{ wmleasebus.DefaultMarshaler }

func (nothing) Unmarshal(queue.Delivery[[]byte]) (*message.Message, error) { return nil, nil }

// An Unmarshaler that returns no message is treated as one that failed.
func TestUnmarshalNilMessageDeadLetters(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	dead := brokertest.Subscribe(t, b, "dead", "ops")
	sub := newSubscriber(t, b, wmleasebus.SubscriberConfig{ConsumerGroup: "g", Unmarshaler: nothing{},
		SubscribeOptions: []broker.SubscribeOption{broker.WithDeadLetterTopic("dead")}})
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(context.Background(), "t", []byte("x")); err != nil {
		t.Fatal(err)
	}
	subscribe(t, sub, "t")
	if dl := receiveDeadLetter(t, dead); dl.Reason != queue.ReasonRejected || !strings.Contains(dl.LastError, "no message") {
		t.Fatalf("dead letter %+v", dl)
	}
}

// failing refuses every delivery.
type failing struct{ wmleasebus.DefaultMarshaler }

func (failing) Unmarshal(queue.Delivery[[]byte]) (*message.Message, error) {
	return nil, errors.New("not a watermill message")
}

// A delivery the Unmarshaler refuses is dead-lettered at once (no retry
// fixes it), with the error kept, and logged.
func TestUnmarshalErrorDeadLetters(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	logger := watermill.NewCaptureLogger()
	dead := brokertest.Subscribe(t, b, "dead", "ops")
	sub, err := wmleasebus.NewSubscriber(b, wmleasebus.SubscriberConfig{ConsumerGroup: "g", Unmarshaler: failing{},
		SubscribeOptions: []broker.SubscribeOption{broker.WithDeadLetterTopic("dead")}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(context.Background(), "t", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	bs := subscription(t, b, "t", "g")
	ch := subscribe(t, sub, "t")
	dl := receiveDeadLetter(t, dead)
	if dl.Reason != queue.ReasonRejected || dl.Attempts != 1 || !strings.Contains(dl.LastError, "not a watermill message") {
		t.Fatalf("dead letter %+v", dl)
	}
	checkStats(t, bs, queue.Stats{Published: 1, Delivered: 1, DeadLettered: 1})
	select {
	case m := <-ch:
		t.Fatalf("got message %q", m.UUID)
	default:
	}
	logged := false
	for _, c := range logger.Captured()[watermill.ErrorLogLevel] {
		logged = logged || (c.Msg == "Cannot unmarshal message; dead-lettering it" && c.Err != nil &&
			c.Err.Error() == "not a watermill message" && c.Fields["topic"] == "t")
	}
	if !logged {
		t.Errorf("not logged: %v", logger.Captured())
	}
}
