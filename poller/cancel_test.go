package poller_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// A running job cancelled through the registry: its handler's context
// ends with a cause matching ErrCancelled, and its message is settled as
// the caller chose, whatever the handler returns: retried with its
// attempt spent, dead-lettered with the cancellation as its last error,
// or deleted.
func TestCancelSettlesAsChosen(t *testing.T) {
	for _, tc := range []struct {
		as   poller.CancelAs
		want poller.Outcome
	}{
		{poller.CancelRetry, poller.OutcomeRetried},
		{poller.CancelDeadLetter, poller.OutcomeDeadLettered},
		{poller.CancelDelete, poller.OutcomeAcked},
	} {
		t.Run(tc.as.String(), func(t *testing.T) {
			mock, b, sub := newBroker(t, broker.WithRetry(queue.RetryPolicy{Initial: time.Second}))
			reg := poller.NewRegistry()
			calls := make(chan handlerCall, 4)
			ev := newEvents[string]()
			p, err := poller.New(sub, blockingHandler(calls), poller.WithRegistry(reg, "jobs"), ev.option())
			if err != nil {
				t.Fatal(err)
			}
			publish(t, b, "export")
			start(t, p)
			c := recv(t, calls)
			if err := reg.Cancel(c.d.ID, tc.as); err != nil {
				t.Fatal(err)
			}
			<-c.ctx.Done()
			if cause := context.Cause(c.ctx); !errors.Is(cause, poller.ErrCancelled) {
				t.Fatalf("cause %v, want ErrCancelled", cause)
			}
			if err := reg.Cancel(c.d.ID, poller.CancelDelete); err != nil {
				t.Fatalf("a second Cancel: %v, want nil (the first choice stands)", err)
			}
			c.done <- nil // the handler returns nil: the cancellation decides
			e := ev.next(t, tc.want)
			if tc.as != poller.CancelDelete && !errors.Is(e.Err, poller.ErrCancelled) {
				t.Fatalf("event error %v, want ErrCancelled", e.Err)
			}
			quiet(t, p)
			switch tc.as {
			case poller.CancelRetry:
				mock.Add(time.Second) // the backoff
				again := recv(t, calls)
				if again.d.ID != c.d.ID || again.d.Attempt != 2 {
					t.Fatalf("again %+v, want the message on attempt 2", again.d)
				}
				again.done <- nil
				ev.next(t, poller.OutcomeAcked)
			case poller.CancelDeadLetter:
				dl := b.DeadLetters()
				if len(dl) != 1 || dl[0].Message.ID != c.d.ID || !strings.Contains(dl[0].LastError, "cancelled") {
					t.Fatalf("dead letters %+v, want the message, cancelled", dl)
				}
			case poller.CancelDelete:
				if st := sub.Stats(); st.Acked != 1 || st.Visible+st.Delayed+st.InFlight != 0 {
					t.Fatalf("%+v, want it gone", st)
				}
			}
		})
	}
}

// A handler that ignores its context keeps running, and its lease, after
// Cancel, until it returns; then the message is settled as chosen.
func TestCancelWaitsForAHandlerThatIgnoresIt(t *testing.T) {
	mock, b, sub := newBroker(t)
	reg := poller.NewRegistry()
	calls := make(chan handlerCall, 1)
	ev := newEvents[string]()
	p, err := poller.New(sub, blockingHandler(calls), poller.WithRegistry(reg, "jobs"), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "stubborn")
	start(t, p)
	c := recv(t, calls)
	if err := reg.Cancel(c.d.ID, poller.CancelDelete); err != nil {
		t.Fatal(err)
	}
	quiet(t, p)
	mock.Add(time.Minute) // six visibility timeouts: the pool keeps the lease
	quiet(t, p)
	if st := sub.Stats(); st.InFlight != 1 || st.Visible != 0 {
		t.Fatalf("%+v: want the message still leased to its handler", st)
	}
	if h := reg.Pools()[0].Handlers; len(h) != 1 || h[0].MessageID != c.d.ID {
		t.Fatalf("registry shows %+v, want the handler running", h)
	}
	c.done <- errors.New("finished anyway")
	ev.next(t, poller.OutcomeAcked)
}

// What Cancel refuses: a message no handler runs, and an unknown choice.
func TestCancelRefuses(t *testing.T) {
	reg := poller.NewRegistry()
	if err := reg.Cancel(uuid.New(), poller.CancelRetry); !errors.Is(err, poller.ErrNotRunning) {
		t.Errorf("Cancel of nothing: %v, want ErrNotRunning", err)
	}
	for _, as := range []poller.CancelAs{0, -1, poller.CancelDelete + 1} {
		if err := reg.Cancel(uuid.New(), as); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("Cancel(%v): %v, want ErrInvalidArgument", as, err)
		}
	}
}

// In a batch pool Cancel ends the call's context and settles the message
// as chosen; the batch's other messages are settled by its outcomes.
func TestCancelInABatch(t *testing.T) {
	_, b, sub := newBroker(t)
	reg := poller.NewRegistry()
	type call struct {
		ctx context.Context
		ds  []queue.Delivery[string]
	}
	calls := make(chan call, 1)
	p, err := poller.NewBatch(sub, func(ctx context.Context, ds []queue.Delivery[string]) ([]error, error) {
		calls <- call{ctx, append([]queue.Delivery[string](nil), ds...)}
		<-ctx.Done()
		return nil, nil // every message acked, but for the one cancelled
	}, poller.WithBatchMax(2, time.Hour), poller.WithRegistry(reg, "batch"))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "b")
	start(t, p)
	c := recv(t, calls)
	if err := reg.Cancel(c.ds[1].ID, poller.CancelDeadLetter); err != nil {
		t.Fatal(err)
	}
	quiet(t, p)
	eventually(t, func() bool { return p.Stats().Acked == 1 && p.Stats().DeadLettered == 1 })
	if dl := b.DeadLetters(); len(dl) != 1 || dl[0].Message.ID != c.ds[1].ID {
		t.Fatalf("dead letters %+v, want %s", dl, c.ds[1].Payload)
	}
}
