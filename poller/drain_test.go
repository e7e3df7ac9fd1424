package poller_test

// Draining on shutdown, and the handler timeout.

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

func TestDrainFinishesRunningAndReleasesTheRest(t *testing.T) {
	_, b, sub := newBroker(t)
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls),
		poller.WithWorkers(2), poller.WithMaxOutstanding(4), poller.WithBatch(4), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "b", "c", "d")
	r := start(t, p)
	c1, c2 := recv(t, calls), recv(t, calls) // a and b run; c and d wait, leased
	if got := []string{c1.d.Payload, c2.d.Payload}; !slices.Contains(got, "a") || !slices.Contains(got, "b") {
		t.Fatalf("running %v, want a and b", got)
	}
	if st := sub.Stats(); st.InFlight != 4 {
		t.Fatalf("sub stats %+v, want 4 in flight", st)
	}

	r.cancel()
	released := []string{ev.next(t, poller.OutcomeReleased).Delivery.Payload, ev.next(t, poller.OutcomeReleased).Delivery.Payload}
	slices.Sort(released)
	if !slices.Equal(released, []string{"c", "d"}) {
		t.Fatalf("released %v, want c and d", released)
	}
	if st := sub.Stats(); st.InFlight != 2 || st.Visible != 2 {
		t.Fatalf("sub stats %+v during the drain", st)
	}
	for _, c := range []handlerCall{c1, c2} {
		if err := c.ctx.Err(); err != nil {
			t.Fatalf("handler context cancelled during the drain: %v", err)
		}
	}
	if r.returned() {
		t.Fatalf("Run returned %v with handlers running", r.err)
	}

	c1.done <- nil
	c2.done <- nil
	ev.next(t, poller.OutcomeAcked)
	ev.next(t, poller.OutcomeAcked)
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	select {
	case c := <-calls:
		t.Fatalf("handler started for %q during the drain", c.d.Payload)
	default:
	}
	if st := sub.Stats(); st.Acked != 2 || st.Visible != 2 || st.InFlight != 0 {
		t.Fatalf("sub stats %+v after the drain", st)
	}
	ds := sub.TryPoll(2)
	if len(ds) != 2 || ds[0].Payload != "c" || ds[1].Payload != "d" || ds[0].Attempt != 1 || ds[1].Attempt != 1 {
		t.Fatalf("after the drain: %+v, want c and d at Attempt 1", ds)
	}
	if st := p.Stats(); st.Released != 2 || st.Acked != 2 || st.InFlight != 0 || st.Running != 0 || st.Errors != 0 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestDrainTimeoutCancelsHandlers(t *testing.T) {
	mock, b, sub := newBroker(t)
	type cancelled struct {
		at    time.Time
		cause error
	}
	started, stopped := make(chan struct{}), make(chan cancelled, 1)
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		close(started)
		<-ctx.Done()
		stopped <- cancelled{mock.Now(), context.Cause(ctx)}
		return ctx.Err()
	}, poller.WithDrainTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	recv(t, started)
	from := mock.Now()
	r.cancel()
	var got cancelled
wait:
	for {
		select {
		case got = <-stopped:
			break wait
		default:
			mock.Add(time.Second)
		}
	}
	if d := got.at.Sub(from); d < 5*time.Second {
		t.Fatalf("handler cancelled %v into the drain, before the 5s drain timeout", d)
	}
	if !errors.Is(got.cause, poller.ErrDrainTimeout) {
		t.Fatalf("cause %v, want ErrDrainTimeout", got.cause)
	}
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Retried != 1 || st.Running != 0 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestHandlerTimeout(t *testing.T) {
	mock, b, sub := newBroker(t)
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithHandlerTimeout(5*time.Second), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	c := recv(t, calls)
	if dl, ok := c.ctx.Deadline(); !ok || !dl.Equal(epoch.Add(5*time.Second)) {
		t.Fatalf("handler deadline %v %v, want 5s", dl, ok)
	}
	mock.Add(5*time.Second - time.Millisecond)
	if err := c.ctx.Err(); err != nil {
		t.Fatalf("cancelled before its deadline: %v", err)
	}
	mock.Add(time.Millisecond)
	recv(t, c.ctx.Done())
	if err := c.ctx.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err %v, want context.DeadlineExceeded", err)
	}
	if got := mock.Now().Sub(epoch); got != 5*time.Second {
		t.Fatalf("timed out at %v", got)
	}
	c.done <- c.ctx.Err()
	if e := ev.next(t, poller.OutcomeRetried); !errors.Is(e.Err, context.DeadlineExceeded) {
		t.Fatalf("retried with %v", e.Err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
