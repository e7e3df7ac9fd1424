package queue_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// A Deduper makes a consumer effectively-once: a redelivered message that
// already succeeded is skipped, and a failed one runs again.
func ExampleDeduper() {
	seen, _ := queue.NewDeduper(10_000)
	id := uuid.MustParse("6f1c2f4e-0000-4000-8000-000000000001")
	charge := func(attempt int) func() error {
		return func() error {
			if attempt == 1 {
				return errors.New("timeout")
			}
			fmt.Println("charged card, attempt", attempt)
			return nil
		}
	}
	for attempt := 1; attempt <= 3; attempt++ { // at-least-once: three deliveries
		ran, err := seen.Do(id, charge(attempt))
		fmt.Println("attempt", attempt, "ran:", ran, "err:", err)
	}
	// Output:
	// attempt 1 ran: true err: timeout
	// charged card, attempt 2
	// attempt 2 ran: true err: <nil>
	// attempt 3 ran: false err: <nil>
}

// A Queue works on its own, without a broker: Offer stores, Poll leases.
func ExampleNew() {
	ctx := context.Background()
	q, _ := queue.New[string](queue.Config{Name: "solo", MaxAttempts: 3}, func(dl queue.DeadLetter[string]) {
		fmt.Println("dead:", dl.Message.Payload, dl.Reason)
	})
	defer q.Close()
	q.Offer(ctx, &queue.Message[string]{Payload: "hello"}, 0)
	ds, _ := q.Poll(ctx, 1)
	q.Reject(ds[0].LeaseID, errors.New("not today"))
	fmt.Printf("%+v\n", q.Stats())
	// Output:
	// dead: hello rejected
	// {Visible:0 Delayed:0 InFlight:0 HeldBack:0 Published:1 Delivered:1 Acked:0 Redelivered:0 DeadLettered:1 Dropped:0 Redriven:0 Rejected:0}
}
