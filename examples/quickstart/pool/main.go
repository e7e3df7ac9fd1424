// Command pool is the README's first quick start: a worker pool that
// drains a subscription, retrying failures and dead-lettering poison.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

type Order struct{ ID int }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	b, err := broker.New[Order]()
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if err := b.CreateTopic("orders"); err != nil {
		panic(err)
	}
	sub, err := b.Subscribe("orders", "billing", broker.WithMaxAttempts(3)) // a queue of its own
	if err != nil {
		panic(err)
	}
	for i := range 10 {
		if _, err := b.Publish(ctx, "orders", Order{ID: i}); err != nil {
			panic(err)
		}
	}
	pool, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[Order]) error {
		fmt.Println("charging order", d.Payload.ID, "attempt", d.Attempt)
		return nil // an error retries after a backoff; the third failure dead-letters it
	}, poller.WithWorkers(4))
	if err != nil {
		panic(err)
	}
	if err := pool.RunUntilIdle(ctx); err != nil { // or pool.Run(ctx): until Ctrl-C, then drains
		panic(err)
	}
	fmt.Println(pool.Stats())
}
