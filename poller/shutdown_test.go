package poller_test

// Shutdown: a drain whose deadline the caller chooses when it stops.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Running handlers finish however far the clock moves past the drain
// timeout: Shutdown's context bounds the drain, not WithDrainTimeout.
func TestShutdownLetsHandlersFinish(t *testing.T) {
	mock, b, sub := newBroker(t)
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New[string](oneAtATime{sub}, blockingHandler(calls), poller.WithWorkers(1), poller.WithMaxOutstanding(2),
		poller.WithBatch(2), poller.WithDrainTimeout(time.Second), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x", "y")
	c := recv(t, calls) // x runs
	// y waits, leased, once the pool is at rest: its Polls take one
	// message each, so y comes with a second Poll, which a Shutdown
	// before it would stop, leaving nothing to release.
	awaitQuiet(t, p)
	if st := p.Stats(); st.InFlight != 2 {
		t.Fatalf("at rest the pool holds %d leases, want x and y", st.InFlight)
	}
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(context.Background()) }()
	if e := ev.next(t, poller.OutcomeReleased); e.Delivery.Payload != "y" { // the drain has begun
		t.Fatalf("released %q, want y", e.Delivery.Payload)
	}
	mock.Add(time.Minute) // far past the 1s drain timeout, inside the extension limit
	if err := c.ctx.Err(); err != nil {
		t.Fatalf("the handler's context ended %v into a Shutdown with no deadline: %v", time.Minute, err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v while a handler ran", err)
	default:
	}
	c.done <- nil
	ev.next(t, poller.OutcomeAcked)
	if err := recv(t, shut); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Run = %v after Shutdown, want nil", err)
	}
	if st := sub.Stats(); st.Acked != 1 || st.Visible != 1 || st.InFlight != 0 {
		t.Fatalf("after Shutdown: %+v, want x acked and y visible", st)
	}
}

// When Shutdown's context ends first, the handlers' contexts are cancelled
// (cause ErrDrainTimeout) and Shutdown returns the context's error; the run
// returns once they have.
func TestShutdownDeadlineCancelsHandlers(t *testing.T) {
	_, b, sub := newBroker(t)
	started, cause := make(chan struct{}), make(chan error, 1)
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	recv(t, started)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled", err)
	}
	if err := recv(t, cause); !errors.Is(err, poller.ErrDrainTimeout) {
		t.Fatalf("the handler's context ended with cause %v, want ErrDrainTimeout", err)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if st := p.Stats(); st.Retried != 1 || st.Running != 0 {
		t.Fatalf("poller stats %+v, want the cancelled handler's attempt retried", st)
	}
}

// A RunUntilIdle stopped before the source is idle says so: its nil means
// the work is done.
func TestShutdownStopsRunUntilIdle(t *testing.T) {
	_, b, sub := newBroker(t)
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	// One Poll leases x and y; y waits for the one worker, so the drain
	// has y to release, which says that the Shutdown has stopped the
	// polling before x's handler returns. (With nothing held back, a
	// Shutdown late to start let the pool poll y and start its handler,
	// which nobody answered: the test hung.)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithWorkers(1), poller.WithMaxOutstanding(2), poller.WithBatch(2), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "x", "y")
	r := startUntilIdle(t, context.Background(), p)
	c := recv(t, calls)
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(context.Background()) }()
	if e := ev.next(t, poller.OutcomeReleased); e.Delivery.Payload != "y" {
		t.Fatalf("released %q, want y", e.Delivery.Payload)
	}
	c.done <- nil
	if err := recv(t, shut); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := r.wait(t); !errors.Is(err, poller.ErrShutdown) {
		t.Fatalf("RunUntilIdle = %v, want ErrShutdown (y is still queued)", err)
	}
	if st := sub.Stats(); st.Acked != 1 || st.Visible != 1 {
		t.Fatalf("after Shutdown: %+v, want x acked and y visible", st)
	}
}

// Shutdown of a Poller that is not running changes nothing; a nil context
// is refused.
func TestShutdownNotRunning(t *testing.T) {
	_, b, sub := newBroker(t)
	ev := newEvents[string]()
	p, err := poller.New(sub, func(context.Context, queue.Delivery[string]) error { return nil }, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1012 a nil context is the invalid input under test
	if err := p.Shutdown(nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("Shutdown(nil) = %v, want ErrInvalidArgument", err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown of an idle Poller = %v, want nil", err)
	}
	r := start(t, p)
	publish(t, b, "x")
	ev.next(t, poller.OutcomeAcked)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after Run returned = %v, want nil", err)
	}
}

// oneAtATime is a subscription whose Polls lease one message each, as a
// Poll that wakes for the first of two publishes may.
type oneAtATime struct{ *broker.Subscription[string] }

func (o oneAtATime) Poll(ctx context.Context, n int) ([]queue.Delivery[string], error) {
	return o.Subscription.Poll(ctx, 1)
}

func (o oneAtATime) PollFor(ctx context.Context, req backend.PollRequest[string]) ([]queue.Delivery[string], bool, error) {
	req.Max = 1
	return o.Subscription.PollFor(ctx, req)
}
