package poller_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// One worker handles the messages in publish order; Run drains and
// returns once its context is cancelled.
func ExampleNew() {
	b, _ := broker.New[string]()
	defer b.Close()
	b.CreateTopic("orders")
	sub, _ := b.Subscribe("orders", "shipping")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, id := range []string{"A-1", "A-2", "A-3"} {
		b.Publish(ctx, "orders", id)
	}

	handled := 0
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		fmt.Printf("shipping %s (attempt %d)\n", d.Payload, d.Attempt)
		if handled++; handled == 3 {
			cancel() // stop after the third: Run drains, acking it
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := p.Run(ctx); err != nil {
		fmt.Println(err)
	}
	st := p.Stats()
	fmt.Printf("acked %d, in flight %d\n", st.Acked, st.InFlight)
	// Output:
	// shipping A-1 (attempt 1)
	// shipping A-2 (attempt 1)
	// shipping A-3 (attempt 1)
	// acked 3, in flight 0
}

// A handler's result decides what becomes of its message.
func ExampleGiveUp() {
	b, _ := broker.New[string]()
	defer b.Close()
	b.CreateTopic("orders")
	sub, _ := b.Subscribe("orders", "shipping")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Publish(ctx, "orders", "not-an-order")

	p, _ := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		defer cancel()
		return fmt.Errorf("order %q: %w", d.Payload, poller.GiveUp(errors.New("malformed")))
	})
	p.Run(ctx)

	for _, dl := range b.DeadLetters() {
		fmt.Printf("%s after %d attempt: %s\n", dl.Reason, dl.Attempts, dl.LastError)
	}
	// Output:
	// rejected after 1 attempt: order "not-an-order": malformed
}

// A service runs the pool with a context that does not end and, when told
// to stop, gives the running handlers a deadline of its choosing, as with
// http.Server.Shutdown.
func ExamplePoller_Shutdown() {
	b, _ := broker.New[string]()
	defer b.Close()
	b.CreateTopic("emails")
	sub, _ := b.Subscribe("emails", "sender")

	sending := make(chan struct{})
	p, _ := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		close(sending) // the stop signal arrives while this runs
		fmt.Println("sending", d.Payload)
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- p.Run(context.Background()) }()
	b.Publish(context.Background(), "emails", "welcome")

	<-sending // say, SIGTERM
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		fmt.Println("handlers cut off:", err)
	}
	fmt.Println("Run returned:", <-ran)
	fmt.Println("acked:", sub.Stats().Acked)
	// Output:
	// sending welcome
	// Run returned: <nil>
	// acked: 1
}
