package poller_test

// What a handler's result does: an error, a panic or a Goexit is a failure;
// RetryAfter, GiveUp and Idempotent.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

func TestHandlerErrorRedeliversAfterBackoff(t *testing.T) {
	mock, b, sub := newBroker(t, broker.WithRetry(queue.RetryPolicy{Initial: time.Second}))
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	c := recv(t, calls)
	if c.d.Attempt != 1 {
		t.Fatalf("Attempt %d", c.d.Attempt)
	}
	c.done <- errors.New("boom")
	if e := ev.next(t, poller.OutcomeRetried); e.Err == nil || e.Err.Error() != "boom" || e.SourceErr != nil {
		t.Fatalf("retried with %v / %v", e.Err, e.SourceErr)
	}

	awaitParked(t, sub, 1) // the poller waits for the retry delay
	mock.Add(time.Second - time.Millisecond)
	if st := sub.Stats(); st.Delayed != 1 {
		t.Fatalf("before the backoff: %+v, want the message delayed", st)
	}
	select {
	case c := <-calls:
		t.Fatalf("redelivered before the backoff, attempt %d", c.d.Attempt)
	default:
	}
	mock.Add(time.Millisecond)
	c2 := recv(t, calls)
	if c2.d.Attempt != 2 || c2.d.ID != c.d.ID {
		t.Fatalf("redelivery: Attempt %d", c2.d.Attempt)
	}
	if got := mock.Now().Sub(epoch); got != time.Second {
		t.Fatalf("redelivered at %v, want 1s", got)
	}
	c2.done <- nil
	ev.next(t, poller.OutcomeAcked)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Polled != 2 || st.Retried != 1 || st.Acked != 1 || st.Errors != 0 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestPanicIsFailure(t *testing.T) {
	_, b, sub := newBroker(t, broker.WithMaxAttempts(1))
	ev := newEvents[string]()
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		panic("kaboom " + d.Payload)
	}, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	e := ev.next(t, poller.OutcomeDeadLettered) // its one attempt: the failure dead-letters it
	var pe *poller.PanicError
	if !errors.As(e.Err, &pe) || pe.Value != "kaboom x" || !strings.Contains(string(pe.Stack), "poller_test") {
		t.Fatalf("handler error %#v, want a *PanicError with value and stack", e.Err)
	}
	dls := b.DeadLetters()
	if len(dls) != 1 || dls[0].Reason != queue.ReasonMaxAttempts || !strings.Contains(dls[0].LastError, "kaboom x") {
		t.Fatalf("dead letters %+v, want one whose LastError names the panic", dls)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Panics != 1 || st.Retried != 0 || st.DeadLettered != 1 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestPanicWithErrorUnwraps(t *testing.T) {
	sentinel := errors.New("sentinel")
	pe := &poller.PanicError{Value: sentinel}
	if !errors.Is(pe, sentinel) {
		t.Fatal("PanicError does not unwrap an error value")
	}
	if (&poller.PanicError{Value: 42}).Unwrap() != nil {
		t.Fatal("PanicError unwraps a non-error value")
	}
}

func TestHandlerGoexitIsFailure(t *testing.T) {
	_, b, sub := newBroker(t, broker.WithRetry(queue.RetryPolicy{NoBackoff: true}))
	ev := newEvents[string]()
	var n atomic.Int32
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		if n.Add(1) == 1 {
			runtime.Goexit()
		}
		return nil
	}, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	publish(t, b, "x")
	if e := ev.next(t, poller.OutcomeRetried); e.Err == nil || !strings.Contains(e.Err.Error(), "Goexit") {
		t.Fatalf("retried with %v", e.Err)
	}
	// The single worker is replaced: the redelivery is handled.
	if e := ev.next(t, poller.OutcomeAcked); e.Delivery.Attempt != 2 {
		t.Fatalf("acked attempt %d", e.Delivery.Attempt)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestRetryAfterNacksWithItsDelay(t *testing.T) {
	// The retry policy's 1m backoff must not apply: RetryAfter names 5s.
	mock, b, sub := newBroker(t, broker.WithRetry(queue.RetryPolicy{Initial: time.Minute}))
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	c := recv(t, calls)
	cause := errors.New("rate limited")
	c.done <- RetryAfterWrapped(5*time.Second, cause)
	e := ev.next(t, poller.OutcomeRetried)
	if !errors.Is(e.Err, cause) || e.SourceErr != nil {
		t.Fatalf("retried with %v / %v", e.Err, e.SourceErr)
	}
	awaitParked(t, sub, 1)
	mock.Add(5*time.Second - time.Millisecond)
	if st := sub.Stats(); st.Delayed != 1 {
		t.Fatalf("before 5s: %+v", st)
	}
	mock.Add(time.Millisecond)
	c = recv(t, calls)
	if c.d.Attempt != 2 || mock.Now().Sub(epoch) != 5*time.Second {
		t.Fatalf("redelivered with Attempt %d at %v", c.d.Attempt, mock.Now().Sub(epoch))
	}
	c.done <- nil
	ev.next(t, poller.OutcomeAcked)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// RetryAfterWrapped wraps RetryAfter, to check the directive is found in
// the chain.
func RetryAfterWrapped(d time.Duration, err error) error {
	return errors.Join(poller.RetryAfter(d, err))
}

func TestRetryAfterNegativeDelayIsZero(t *testing.T) {
	_, b, sub := newBroker(t)
	ev := newEvents[string]()
	var n atomic.Int32
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		if n.Add(1) == 1 {
			return poller.RetryAfter(-time.Second, nil)
		}
		return nil
	}, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	publish(t, b, "x")
	if e := ev.next(t, poller.OutcomeRetried); e.SourceErr != nil || e.Err.Error() != "retry after 0s" {
		t.Fatalf("retried with %v / %v", e.Err, e.SourceErr)
	}
	if e := ev.next(t, poller.OutcomeAcked); e.Delivery.Attempt != 2 {
		t.Fatalf("acked attempt %d, want 2 (redelivered at once)", e.Delivery.Attempt)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestGiveUpRejects(t *testing.T) {
	_, b, sub := newBroker(t) // 5 attempts allowed
	ev := newEvents[string]()
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		return errors.Join(errors.New("order 7"), poller.GiveUp(errors.New("malformed")))
	}, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	if e := ev.next(t, poller.OutcomeDeadLettered); e.SourceErr != nil {
		t.Fatal(e.SourceErr)
	}
	dls := b.DeadLetters()
	if len(dls) != 1 || dls[0].Reason != queue.ReasonRejected || dls[0].Attempts != 1 || dls[0].LastError != "order 7\nmalformed" {
		t.Fatalf("dead letters %+v, want one rejected after 1 attempt with the handler's error", dls)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.DeadLettered != 1 || st.Retried != 0 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestGiveUpWithoutRejectFails(t *testing.T) {
	mock, b, sub := newBroker(t)
	ev := newEvents[string]()
	p, err := poller.New(plainSource{sub}, func(ctx context.Context, d queue.Delivery[string]) error {
		return poller.GiveUp(nil)
	}, ev.option(), poller.WithClock(mock))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	if e := ev.next(t, poller.OutcomeRetried); e.SourceErr != nil || e.Err.Error() != "gave up" {
		t.Fatalf("retried with %v / %v", e.Err, e.SourceErr)
	}
	if st := sub.Stats(); st.Delayed != 1 || st.DeadLettered != 0 {
		t.Fatalf("sub stats %+v, want the message failed and waiting for its retry", st)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestIdempotentAcksDuplicateWithoutRunning(t *testing.T) {
	mock, b, sub := newBroker(t, broker.WithRetry(queue.RetryPolicy{Initial: time.Second}))
	ded, err := poller.NewDeduper(16)
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(sub, poller.Idempotent(ded, blockingHandler(calls)),
		poller.WithWorkers(2), poller.WithExtension(0, poller.NoExtension), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	c := recv(t, calls) // attempt 1 runs, slowly

	awaitParked(t, sub, 1)
	mock.Add(10 * time.Second) // its lease lapses: attempt 2 goes to the other worker
	e := ev.next(t, poller.OutcomeRetried)
	if e.Delivery.Attempt != 2 || !errors.Is(e.Err, poller.ErrInProgress) {
		t.Fatalf("attempt %d retried with %v, want attempt 2 failed as in progress", e.Delivery.Attempt, e.Err)
	}

	c.done <- nil // attempt 1 succeeds after all; its Ack is too late
	if e := ev.next(t, poller.OutcomeSettleFailed); !errors.Is(e.SourceErr, queue.ErrLeaseExpired) {
		t.Fatalf("late Ack: %v", e.SourceErr)
	}
	awaitParked(t, sub, 1)
	mock.Add(2 * time.Second) // attempt 2's backoff; attempt 3 is a duplicate, acked without running
	if e := ev.next(t, poller.OutcomeAcked); e.Delivery.Attempt != 3 || e.SourceErr != nil {
		t.Fatalf("attempt %d acked with %v", e.Delivery.Attempt, e.SourceErr)
	}
	select {
	case c := <-calls:
		t.Fatalf("handler ran again, attempt %d", c.d.Attempt)
	default:
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := sub.Stats(); st.Acked != 1 || st.InFlight+st.Visible+st.Delayed != 0 {
		t.Fatalf("sub stats %+v", st)
	}
}

func TestIdempotentRetriesAfterFailure(t *testing.T) {
	ded, _ := poller.NewDeduper(4)
	var runs atomic.Int32
	h := poller.Idempotent(ded, func(ctx context.Context, d queue.Delivery[string]) error {
		if runs.Add(1) == 1 {
			return errors.New("transient")
		}
		return nil
	})
	_, b, sub := newBroker(t)
	publish(t, b, "x")
	d := sub.TryPoll(1)[0]
	for i, want := range []bool{true, false, false} { // fails, succeeds, skipped
		if err := h(context.Background(), d); (err != nil) != want {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

func TestIdempotentWithNilArgumentsIsAnInvalidHandler(t *testing.T) {
	ded, err := poller.NewDeduper(10)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New[string]()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.CreateTopic("t")
	sub, err := b.Subscribe("t", "s")
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, queue.Delivery[string]) error { return nil }
	for name, h := range map[string]poller.Handler[string]{
		"nil deduper": poller.Idempotent[string](nil, ok),
		"nil handler": poller.Idempotent[string](ded, nil),
	} {
		if _, err := poller.New(sub, h); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: New = %v, want ErrInvalidArgument", name, err)
		}
	}
}

// RetryAfter on the last attempt dead-letters the message with the
// handler's error as its LastError (it used to be "nacked"); on an earlier
// attempt the error is kept too, and the delay is RetryAfter's.
func TestRetryAfterKeepsTheError(t *testing.T) {
	_, b, sub := newBroker(t, broker.WithMaxAttempts(1))
	ev := newEvents[string]()
	p, err := poller.New(sub, func(context.Context, queue.Delivery[string]) error {
		return poller.RetryAfter(5*time.Second, errors.New("webhook 1: 429 too many requests"))
	}, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	publish(t, b, "x")
	if e := ev.next(t, poller.OutcomeDeadLettered); e.SourceErr != nil {
		t.Fatalf("dead-lettered with %v", e.SourceErr)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	dls := b.DeadLetters()
	if len(dls) != 1 || dls[0].LastError != "webhook 1: 429 too many requests" || dls[0].Reason != queue.ReasonMaxAttempts {
		t.Fatalf("dead letters %+v", dls)
	}
}
