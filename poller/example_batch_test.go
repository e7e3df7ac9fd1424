package poller_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// A batch handler inserts rows in bulk, up to 100 a call, waiting up to
// 50ms for a batch to fill. One worker (the default) runs one call at a
// time, so the handler's own state needs no lock.
func ExampleNewBatch() {
	b, _ := broker.New[string]()
	defer b.Close()
	b.CreateTopic("events")
	sub, _ := b.Subscribe("events", "warehouse")
	ctx := context.Background()
	for i := range 250 {
		b.Publish(ctx, "events", fmt.Sprintf("row-%d", i))
	}

	inserted, largest := 0, 0
	p, err := poller.NewBatch(sub, func(ctx context.Context, ds []queue.Delivery[string]) ([]error, error) {
		rows := make([]string, len(ds))
		for i, d := range ds {
			rows[i] = d.Payload
		}
		// db.CopyFrom(ctx, rows): one statement for the whole batch
		inserted += len(rows)
		largest = max(largest, len(rows))
		return nil, nil // every row acked; or one error a row, or one for all
	}, poller.WithBatchMax(100, 50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := p.RunUntilIdle(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("inserted %d rows, at most %d a call; acked %d\n", inserted, largest, p.Stats().Acked)
	// Output:
	// inserted 250 rows, at most 100 a call; acked 250
}
