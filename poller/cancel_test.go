package poller_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
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
				if len(dl) != 1 || dl[0].Message.ID != c.d.ID || dl[0].Reason != queue.ReasonCancelled || !strings.Contains(dl[0].LastError, "cancelled") {
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

// Inside a synctest bubble, on the real clock: a job stuck on a partner
// that takes an hour is cancelled by on-call after 10 s and retried after
// the subscription's 5 s backoff, at exactly 15 s; its second attempt
// runs to the end of its hour.
func TestCancelInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, sub := newBrokerOn(t, clock.New(), broker.WithRetry(queue.RetryPolicy{Initial: 5 * time.Second}))
		reg := poller.NewRegistry()
		start0 := time.Now()
		type run struct {
			attempt  int
			from, to time.Duration
			cause    error
		}
		runs := make(chan run, 2)
		ids := make(chan uuid.UUID, 2)
		p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
			ids <- d.ID
			from := time.Since(start0)
			select {
			case <-time.After(time.Hour): // the partner's call
			case <-ctx.Done():
			}
			runs <- run{d.Attempt, from, time.Since(start0), context.Cause(ctx)}
			return nil
		}, poller.WithRegistry(reg, "partner"), poller.WithExtension(0, 2*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		publish(t, b, "sync customer 7")
		r := start(t, p)
		id := <-ids
		time.Sleep(10 * time.Second)
		if err := reg.Cancel(id, poller.CancelRetry); err != nil {
			t.Fatal(err)
		}
		first := <-runs
		<-ids
		second := <-runs
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if first.attempt != 1 || first.from != 0 || first.to != 10*time.Second || !errors.Is(first.cause, poller.ErrCancelled) {
			t.Fatalf("first run %+v, want attempt 1 from 0s to 10s, cancelled", first)
		}
		if second.attempt != 2 || second.from != 15*time.Second || second.to != 15*time.Second+time.Hour || second.cause != nil {
			t.Fatalf("second run %+v, want attempt 2 from 15s for an hour", second)
		}
		if st := sub.Stats(); st.Acked != 1 {
			t.Fatalf("%+v, want the second attempt acked", st)
		}
	})
}
