package leasebuspubsub_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"gocloud.dev/pubsub"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/leasebuspubsub"
	"github.com/leasebus/leasebus/queue"
)

// Code written against gocloud's portable API, on a broker the program
// registers: a failed attempt is nacked, and comes back after the retry
// policy's backoff with its attempt raised.
func Example() {
	ctx := context.Background()
	b, err := broker.New[[]byte](broker.WithSubscriptionDefaults(broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Millisecond})))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close() // after the Topic and the Subscription are shut down
	if err := b.CreateTopic("orders"); err != nil {
		log.Fatal(err)
	}
	if _, err := b.Subscribe("orders", "billing", broker.WithMaxAttempts(3)); err != nil {
		log.Fatal(err)
	}

	// A program registers on pubsub.DefaultURLMux(), for pubsub.OpenTopic
	// and pubsub.OpenSubscription; this example keeps a mux of its own.
	mux := new(pubsub.URLMux)
	if err := leasebuspubsub.Register(mux, b); err != nil {
		log.Fatal(err)
	}
	topic, err := mux.OpenTopic(ctx, "leasebus://orders")
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Shutdown(ctx)
	sub, err := mux.OpenSubscription(ctx, "leasebus://orders?subscription=billing")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Shutdown(ctx)

	err = topic.Send(ctx, &pubsub.Message{Body: []byte("order 42"), Metadata: map[string]string{"region": "eu"}})
	if err != nil {
		log.Fatal(err)
	}
	for {
		m, err := sub.Receive(ctx)
		if err != nil {
			log.Fatal(err)
		}
		var d queue.Delivery[[]byte]
		m.As(&d)
		fmt.Printf("%s from %s, attempt %d of %d\n", m.Body, m.Metadata["region"], d.Attempt, d.MaxAttempts)
		if d.Attempt == 1 {
			m.Nack() // say the payment service timed out: try again
			continue
		}
		m.Ack()
		break
	}
	// Output:
	// order 42 from eu, attempt 1 of 3
	// order 42 from eu, attempt 2 of 3
}

// A message nacked on its last attempt is dead-lettered, with ErrNacked as
// its last error.
func ExampleOpenSubscription() {
	ctx := context.Background()
	b, err := broker.New[[]byte](broker.WithSubscriptionDefaults(broker.WithRetry(queue.RetryPolicy{NoBackoff: true})))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("jobs"); err != nil {
		log.Fatal(err)
	}
	if _, err := b.Subscribe("jobs", "workers", broker.WithMaxAttempts(2)); err != nil {
		log.Fatal(err)
	}
	topic, err := leasebuspubsub.OpenTopic(b, "jobs", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Shutdown(ctx)
	sub, err := leasebuspubsub.OpenSubscription(b, "jobs", "workers", nil)
	if err != nil {
		log.Fatal(err)
	}

	if err := topic.Send(ctx, &pubsub.Message{Body: []byte("poison")}); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		m, err := sub.Receive(ctx)
		if err != nil {
			log.Fatal(err)
		}
		m.Nack()
	}
	if err := sub.Shutdown(ctx); err != nil { // flushes the last nack
		log.Fatal(err)
	}
	for _, dl := range b.DeadLetters() {
		fmt.Printf("%s: %v after %d attempts (%s)\n", dl.Message.Payload, dl.Reason, dl.Attempts, dl.LastError)
	}
	// Output:
	// poison: max-attempts after 2 attempts (leasebuspubsub: nacked)
}

// The one line a program adds to use leasebus URLs with the package-level
// pubsub.OpenTopic and pubsub.OpenSubscription.
func ExampleRegister() {
	ctx := context.Background()
	b, err := broker.New[[]byte]()
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	if err := leasebuspubsub.Register(pubsub.DefaultURLMux(), b); err != nil {
		log.Fatal(err)
	}

	topic, err := pubsub.OpenTopic(ctx, "leasebus://orders")
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Shutdown(ctx)
	sub, err := pubsub.OpenSubscription(ctx, "leasebus://orders?subscription=billing")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Shutdown(ctx)
}
