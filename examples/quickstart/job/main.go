// Command job is the README's third quick start: a batch job whose queue
// lives in a directory. Run it twice: the second run queues nothing.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

type Item struct {
	Line int
	Text string
}

func main() {
	b, err := broker.Open("job-queue", queue.JSONCodec[Item](), // kept in this directory
		broker.WithDedupWindow(30*24*time.Hour), // a rerun within 30 days knows each item (default: 5 minutes)
		broker.WithDedupLimit(1_000_000),
		broker.WithSubscriptionDefaults(broker.WithMaxQueue(1_000_000), broker.WithMaxAttempts(3)))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("items"); err != nil {
		log.Fatal(err)
	}
	sub, err := b.Subscribe("items", "work") // reopened: the stored subscription, messages and all
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	input := []string{"alpha", "beta", "gamma"}
	items, ids := make([]Item, len(input)), make([]string, len(input))
	for i, text := range input {
		items[i], ids[i] = Item{i + 1, text}, fmt.Sprint("line-", i+1) // one dedup ID per item
	}
	if _, err := b.PublishBatch(ctx, "items", items, broker.WithDedupIDs(ids)); err != nil {
		log.Fatal(err) // run again after a crash: queues nothing twice, skips what was acked
	}
	pool, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[Item]) error {
		fmt.Println("line", d.Payload.Line, d.Payload.Text)
		return nil
	}, poller.WithWorkers(8))
	if err != nil {
		log.Fatal(err)
	}
	if err := pool.RunUntilIdle(ctx); err != nil { // every item acked or dead-lettered
		log.Fatal(err)
	}
	for _, dl := range b.DeadLetters() {
		fmt.Println("failed: line", dl.Message.Payload.Line, dl.LastError)
	}
}
