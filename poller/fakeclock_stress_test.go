package poller_test

// On a mock clock, the outcome of a pool test depends only on the sequence
// of calls, however the pool's goroutines are scheduled: each stress test
// here repeats one scenario many times (fewer under -short).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
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

// A lease held by a running handler stays held, up to the extension limit,
// however far one Add jumps: here from 0 to the lease's deadline, past the
// point (24s) where a timer would have extended it. The handler's Ack then
// succeeds and the message was never delivered twice.
func TestStressHeldLeaseSurvivesOneJump(t *testing.T) {
	for round := range stressRounds() {
		mock, b, sub := newBroker(t, broker.WithVisibilityTimeout(30*time.Second))
		ev := newEvents[string]()
		calls := make(chan handlerCall, 2)
		p, err := poller.New(sub, blockingHandler(calls), poller.WithWorkers(2), poller.WithBatch(1), ev.option())
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, p)
		publish(t, b, "x")
		c := recv(t, calls)    // the first worker runs the handler
		awaitParked(t, sub, 1) // the second waits in Poll
		mock.Add(30 * time.Second)
		c.done <- nil
		e := recv(t, ev.ch)
		for e.Outcome == poller.OutcomeExtended || e.Outcome == poller.OutcomeExtensionStopped {
			e = recv(t, ev.ch)
		}
		if e.Outcome != poller.OutcomeAcked || e.SourceErr != nil {
			t.Fatalf("round %d: %v, source error %v, want acked (the lease lapsed under the handler)", round, e.Outcome, e.SourceErr)
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if st := sub.Stats(); st.Acked != 1 || st.Redelivered != 0 {
			t.Fatalf("round %d: subscription %+v, want one ack and no redelivery", round, st)
		}
		b.Close()
	}
}

// The pool at rest (AwaitQuiet) before an Add: the delayed message the Add
// makes visible is running in a handler by the time the pool is at rest
// again, every round, with nothing waited for in between.
func TestStressAwaitQuietBeforeAndAfterAnAdd(t *testing.T) {
	for round := range stressRounds() {
		mock, b, sub := newBroker(t)
		calls := make(chan handlerCall, 1)
		p, err := poller.New(sub, blockingHandler(calls), poller.WithWorkers(2), poller.WithHandlerTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, p)
		if _, err := b.Publish(context.Background(), "jobs", "later", broker.WithDelay(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		awaitQuiet(t, p)
		mock.Add(10 * time.Second)
		awaitQuiet(t, p)
		if st := p.Stats(); st.Running != 1 {
			t.Fatalf("round %d: %+v, want the message running", round, st)
		}
		c := <-calls
		mock.Add(time.Minute) // its timeout
		awaitQuiet(t, p)
		if c.ctx.Err() == nil {
			t.Fatalf("round %d: the handler's context is live after the Add that reached its timeout", round)
		}
		c.done <- nil
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
}

// Idle is exact: a subscription that time alone empties (a TTL) ends the
// wait of AwaitIdle on the Add that reaches it; and RunUntilIdle waits for
// a handler that outlived its lease, and handles what it published.
func TestStressIdleIsExact(t *testing.T) {
	for round := range stressRounds() {
		mock, b, sub := newBroker(t)
		if _, err := b.Publish(context.Background(), "jobs", "short-lived", broker.WithTTL(50*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		idle := make(chan error, 1)
		pk := backend.NewParking(nil) // says when AwaitIdle waits, its wake-up armed
		go func() { idle <- sub.AwaitIdleFor(context.Background(), pk) }()
		// Its wake-up must be armed before the Add: one armed while the
		// mock moves can miss that move (the mock's own behaviour).
		eventually(t, func() bool { return pk.Parked(mock.Now()) })
		mock.Add(50 * time.Millisecond)
		if err := recv(t, idle); err != nil {
			t.Fatalf("round %d: AwaitIdle: %v", round, err)
		}

		runOutlivedLease(t, fmt.Sprintf("round %d: ", round), mock, b, sub)
		b.Close()
	}
}
