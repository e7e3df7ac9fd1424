package poller_test

import (
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/poller"
)

// A Deduper makes a consumer effectively-once: a redelivered message that
// already succeeded is skipped, and a failed one runs again.
func ExampleDeduper() {
	seen, _ := poller.NewDeduper(10_000)
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
