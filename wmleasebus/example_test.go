package wmleasebus_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/wmleasebus"
)

// A Publisher and a Subscriber over one broker: the consumer group
// "billing" is a leasebus subscription that keeps its messages from
// SubscribeInitialize on; every message waits for its Ack.
func Example() {
	b, err := broker.New[[]byte]()
	if err != nil {
		panic(err)
	}
	defer b.Close()
	logger := watermill.NopLogger{}
	pub, err := wmleasebus.NewPublisher(b, wmleasebus.PublisherConfig{}, logger)
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	sub, err := wmleasebus.NewSubscriber(b, wmleasebus.SubscriberConfig{ConsumerGroup: "billing"}, logger)
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	if err := sub.SubscribeInitialize("orders"); err != nil { // keep what is published from now on
		panic(err)
	}
	for i, customer := range []string{"ada", "grace"} {
		msg := message.NewMessage(fmt.Sprintf("order-%d", i+1), []byte(`{"total":42}`))
		msg.Metadata.Set("customer", customer)
		if err := pub.Publish("orders", msg); err != nil {
			panic(err)
		}
	}

	msgs, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		panic(err)
	}
	for range 2 {
		msg := <-msgs
		d, _ := wmleasebus.DeliveryFromContext(msg.Context())
		fmt.Printf("%s for %s: %s (attempt %d)\n", msg.UUID, msg.Metadata.Get("customer"), msg.Payload, d.Attempt)
		msg.Ack()
	}
	// Output:
	// order-1 for ada: {"total":42} (attempt 1)
	// order-2 for grace: {"total":42} (attempt 1)
}

// A Nack spends the attempt: the message comes back after the
// subscription's retry backoff, and after its last attempt it is
// dead-lettered, with the Nack as its last error. Here the dead letters go
// to a topic (broker.WithDeadLetterTopic), which a watermill Subscriber
// reads like any other: the dead letter keeps the message's UUID and
// Metadata, and adds the leasebus-dead-letter-* keys.
func Example_nack() {
	b, _ := broker.New[[]byte]()
	defer b.Close()
	pub, _ := wmleasebus.NewPublisher(b, wmleasebus.PublisherConfig{}, nil)
	sub, _ := wmleasebus.NewSubscriber(b, wmleasebus.SubscriberConfig{
		ConsumerGroup: "billing",
		SubscribeOptions: []broker.SubscribeOption{
			broker.WithMaxAttempts(2),
			broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Millisecond}),
			broker.WithDeadLetterTopic("orders.dead"),
		},
	}, nil)
	defer sub.Close()
	ops, _ := wmleasebus.NewSubscriber(b, wmleasebus.SubscriberConfig{ConsumerGroup: "ops"}, nil)
	defer ops.Close()
	_ = ops.SubscribeInitialize("orders.dead")
	_ = sub.SubscribeInitialize("orders")
	msg := message.NewMessage("order-1", []byte("charge"))
	msg.Metadata.Set("customer", "ada")
	_ = pub.Publish("orders", msg)

	msgs, _ := sub.Subscribe(context.Background(), "orders")
	for range 2 {
		msg := <-msgs
		d, _ := wmleasebus.DeliveryFromContext(msg.Context())
		fmt.Printf("%s: attempt %d of %d, nack\n", msg.UUID, d.Attempt, d.MaxAttempts)
		msg.Nack()
	}
	dead, _ := ops.Subscribe(context.Background(), "orders.dead")
	dl := <-dead
	fmt.Printf("dead letter %s for %s: %s after %s attempts (%s)\n", dl.UUID, dl.Metadata.Get("customer"),
		dl.Metadata.Get("leasebus-dead-letter-reason"), dl.Metadata.Get("leasebus-dead-letter-attempts"),
		dl.Metadata.Get("leasebus-dead-letter-last-error"))
	dl.Ack()
	// Output:
	// order-1: attempt 1 of 2, nack
	// order-1: attempt 2 of 2, nack
	// dead letter order-1 for ada: max-attempts after 2 attempts (wmleasebus: nacked)
}

// keyed publishes each message with its "customer" metadata as the
// leasebus ordering key.
type keyed struct{ wmleasebus.DefaultMarshaler }

func (k keyed) Marshal(topic string, msg *message.Message) ([]byte, []broker.PublishOption, error) {
	p, opts, err := k.DefaultMarshaler.Marshal(topic, msg)
	return p, append(opts, broker.WithKey(msg.Metadata.Get("customer"))), err
}

// A custom Marshaler adds publish options: here an ordering key, which
// keeps each customer's messages in order even across a Nack (the later
// ones wait behind the nacked one; other customers go on).
func Example_orderingKey() {
	b, _ := broker.New[[]byte]()
	defer b.Close()
	pub, _ := wmleasebus.NewPublisher(b, wmleasebus.PublisherConfig{Marshaler: keyed{}}, nil)
	sub, _ := wmleasebus.NewSubscriber(b, wmleasebus.SubscriberConfig{
		ConsumerGroup:    "billing",
		SubscribeOptions: []broker.SubscribeOption{broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Millisecond})},
	}, nil)
	defer sub.Close()
	_ = sub.SubscribeInitialize("orders")
	for _, id := range []string{"ada-1", "ada-2", "grace-1"} {
		msg := message.NewMessage(id, nil)
		msg.Metadata.Set("customer", id[:len(id)-2])
		_ = pub.Publish("orders", msg)
	}

	msgs, _ := sub.Subscribe(context.Background(), "orders")
	nacked := false
	for range 4 {
		msg := <-msgs
		if msg.UUID == "ada-1" && !nacked {
			fmt.Println(msg.UUID, "nack")
			msg.Nack()
			nacked = true
			continue
		}
		fmt.Println(msg.UUID, "ack")
		msg.Ack()
	}
	// Output:
	// ada-1 nack
	// grace-1 ack
	// ada-1 ack
	// ada-2 ack
}
