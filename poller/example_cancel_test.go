package poller_test

import (
	"context"
	"fmt"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// An operator stops a running export by its message ID, from code (the
// registry a pool joins WithRegistry): the handler sees why its context
// ended, and the message is dead-lettered, as chosen.
func ExampleRegistry_Cancel() {
	b, _ := broker.New[string]()
	defer b.Close()
	b.CreateTopic("exports")
	sub, _ := b.Subscribe("exports", "worker")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	m, _ := b.Publish(ctx, "exports", "customer-42")

	reg := poller.NewRegistry()
	started := make(chan struct{})
	p, _ := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		close(started)
		<-ctx.Done() // a long export that watches its context
		fmt.Println("handler:", context.Cause(ctx))
		stop() // this example's end: Run drains
		return ctx.Err()
	}, poller.WithRegistry(reg, "exports"))
	go func() {
		<-started
		if err := reg.Cancel(m.ID, poller.CancelDeadLetter); err != nil {
			fmt.Println(err)
		}
	}()
	p.Run(ctx)

	for _, dl := range b.DeadLetters() {
		fmt.Printf("%s: %s\n", dl.Reason, dl.LastError)
	}
	// Output:
	// handler: poller: job cancelled (dead-letter)
	// cancelled: poller: job cancelled (dead-letter)
}
