package poller_test

// On a mock clock, the outcome of a pool test depends only on the sequence
// of calls, however the pool's goroutines are scheduled: each stress test
// here repeats one scenario many times (fewer under -short).

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
)

func stressRounds() int {
	if testing.Short() {
		return 50
	}
	return 1000
}

// The Add that reaches a handler's timeout cancels the handler's context:
// the timeout is armed before the handler starts, so before the test can
// move the clock. (A timer armed by another goroutine can land after an
// Add has looked for due timers and before it moves its time; it then
// fires only at the next move.)
func TestStressHandlerTimeoutFiresOnTheAddThatReachesIt(t *testing.T) {
	for round := range stressRounds() {
		mock, b, sub := newBroker(t, broker.WithVisibilityTimeout(time.Minute)) // outlives the Add
		calls := make(chan handlerCall)
		p, err := poller.New(sub, blockingHandler(calls), poller.WithHandlerTimeout(30*time.Second),
			poller.WithExtension(0, poller.NoExtension))
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, p)
		publish(t, b, "x")
		c := recv(t, calls) // the handler has started
		mock.Add(30 * time.Second)
		select {
		case <-c.ctx.Done():
		case <-time.After(hangGuard):
			t.Fatalf("round %d: the handler's context is not done after the Add that reached its timeout", round)
		}
		if cause := context.Cause(c.ctx); cause != context.DeadlineExceeded {
			t.Fatalf("round %d: cause %v", round, cause)
		}
		c.done <- c.ctx.Err()
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
}
