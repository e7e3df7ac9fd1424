package poller_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Both of leasebus's own sources satisfy the interfaces.
var (
	_ poller.Source[string] = (*broker.Subscription[string])(nil)
	_ poller.Source[string] = (*core.Queue[string])(nil)
	_ poller.Rejecter       = (*broker.Subscription[string])(nil)
	_ poller.Rejecter       = (*core.Queue[string])(nil)
)

var epoch = time.Unix(0, 0)

func TestExtensionKeepsSlowHandlerLeaseAlive(t *testing.T) {
	mock, b, sub := newBroker(t) // visibility timeout 10s
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	// The default margin for a 10s lease is 2s; extend for at most 60s.
	p, err := poller.New(sub, blockingHandler(calls), poller.WithExtension(0, time.Minute), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "slow")
	c := recv(t, calls)
	if c.d.Attempt != 1 {
		t.Fatalf("first delivery: Attempt %d", c.d.Attempt)
	}

	// Extend at deadline - 2s, by 10s each time, never past 60s after receipt.
	extensions := map[int]int{8: 18, 16: 26, 24: 34, 32: 42, 40: 50, 48: 58, 56: 60} // when: new deadline
	for sec := 1; sec < 60; sec++ {
		mock.Add(time.Second)
		if to, ok := extensions[sec]; ok {
			e := ev.next(t, poller.OutcomeExtended)
			if want := epoch.Add(time.Duration(to) * time.Second); !e.Delivery.Deadline.Equal(want) {
				t.Fatalf("at %ds: extended to %v, want %v", sec, e.Delivery.Deadline.Sub(epoch), want.Sub(epoch))
			}
		}
		if sec == 58 { // the next extension would pass the limit
			e := ev.next(t, poller.OutcomeExtensionStopped)
			if !errors.Is(e.Err, poller.ErrExtensionLimit) || e.SourceErr != nil {
				t.Fatalf("extension stopped with %v / %v, want ErrExtensionLimit", e.Err, e.SourceErr)
			}
		}
		if st := sub.Stats(); st.InFlight != 1 || st.Visible != 0 || st.Redelivered != 0 {
			t.Fatalf("at %ds, several visibility timeouts in: %+v, want the message in flight, not redelivered", sec, st)
		}
	}
	ev.none(t)
	if st := p.Stats(); st.Extended != 7 || st.InFlight != 1 || st.Running != 1 {
		t.Fatalf("poller stats %+v, want 7 extensions and the message held", st)
	}

	// At 60s the lease lapses: another consumer gets the message, attempt 2.
	mock.Add(time.Second)
	if st := sub.Stats(); st.InFlight != 0 || st.Visible != 1 {
		t.Fatalf("after the limit: %+v, want the message visible again", st)
	}
	ds := sub.TryPoll(1)
	if len(ds) != 1 || ds[0].Attempt != 2 || ds[0].ID != c.d.ID {
		t.Fatalf("redelivery: %+v, want the message with Attempt 2", ds)
	}

	// The stuck handler returns at last: its Ack changes nothing.
	c.done <- nil
	e := ev.next(t, poller.OutcomeAcked)
	if !errors.Is(e.SourceErr, queue.ErrLeaseExpired) {
		t.Fatalf("late Ack: %v, want ErrLeaseExpired", e.SourceErr)
	}
	if err := sub.Ack(ds[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := p.Stats(); st.Acked != 0 || st.Errors != 1 || st.Extended != 7 || st.InFlight != 0 || st.Running != 0 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestPrefetchedLeasesAreExtended(t *testing.T) {
	mock, b, sub := newBroker(t)
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithMaxOutstanding(2), poller.WithBatch(2), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "b")
	r := start(t, p)
	c := recv(t, calls)
	if c.d.Payload != "a" {
		t.Fatalf("first call: %q", c.d.Payload)
	}
	mock.Add(8 * time.Second) // both leases are due: the running one and the waiting one
	got := []string{ev.next(t, poller.OutcomeExtended).Delivery.Payload, ev.next(t, poller.OutcomeExtended).Delivery.Payload}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("extended %v, want a and b", got)
	}
	mock.Add(4 * time.Second) // past the first deadline
	if st := sub.Stats(); st.InFlight != 2 || st.Redelivered != 0 {
		t.Fatalf("sub stats %+v", st)
	}
	c.done <- nil
	ev.next(t, poller.OutcomeAcked)
	c = recv(t, calls)
	if c.d.Payload != "b" || c.d.Attempt != 1 {
		t.Fatalf("second call: %q attempt %d", c.d.Payload, c.d.Attempt)
	}
	c.done <- nil
	ev.next(t, poller.OutcomeAcked)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := sub.Stats(); st.Acked != 2 || st.Redelivered != 0 {
		t.Fatalf("sub stats %+v", st)
	}
}

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

// plainSource hides every method of its source but Source's: no Reject,
// no Config.
type plainSource struct{ poller.Source[string] }

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

func TestConcurrencyNeverExceedsWorkers(t *testing.T) {
	const workers, outstanding, total = 4, 12, 40
	_, b, sub := newBroker(t)
	var cur, peak, started, acked atomic.Int32
	release, done := make(chan struct{}), make(chan struct{})
	var p *poller.Poller[string]
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		n := cur.Add(1)
		defer cur.Add(-1)
		for {
			m := peak.Load()
			if n <= m || peak.CompareAndSwap(m, n) {
				break
			}
		}
		if r := p.Stats().Running; r > workers {
			t.Errorf("Stats().Running = %d", r)
		}
		started.Add(1)
		<-release
		return nil
	}, poller.WithWorkers(workers), poller.WithMaxOutstanding(outstanding), poller.WithBatch(5),
		poller.WithObserver(func(e poller.Event[string]) {
			if e.Outcome == poller.OutcomeAcked && acked.Add(1) == total {
				close(done)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	for range total {
		publish(t, b, "m")
	}
	r := start(t, p)
	t.Cleanup(func() { // before Run's cleanup, should the test fail early
		select {
		case <-release:
		default:
			close(release)
		}
	})

	// Every worker busy and the buffer full: still only `workers` run.
	eventually(t, func() bool { return p.Stats().InFlight == outstanding && started.Load() >= workers })
	if n, st := started.Load(), p.Stats(); n != workers || st.Running != workers {
		t.Fatalf("%d handlers started, Stats %+v; want %d", n, st, workers)
	}
	close(release)
	recv(t, done)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := peak.Load(); got != workers {
		t.Fatalf("peak concurrency %d, want %d", got, workers)
	}
	if st := sub.Stats(); st.Acked != total {
		t.Fatalf("sub stats %+v", st)
	}
}

func TestTenThousandMessagesEightWorkers(t *testing.T) {
	const total = 10_000
	b, err := broker.New[int]()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.CreateTopic("jobs")
	sub, err := b.Subscribe("jobs", "workers")
	if err != nil {
		t.Fatal(err)
	}
	var seen [total]atomic.Int32
	var acked atomic.Int32
	done := make(chan struct{})
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[int]) error {
		seen[d.Payload].Add(1)
		return nil
	}, poller.WithWorkers(8), poller.WithObserver(func(e poller.Event[int]) {
		if e.Outcome == poller.OutcomeAcked && e.SourceErr == nil && acked.Add(1) == total {
			close(done)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	for i := range total {
		if _, err := b.Publish(context.Background(), "jobs", i); err != nil {
			t.Fatal(err)
		}
	}
	recv(t, done)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("message %d handled %d times", i, n)
		}
	}
	if st := sub.Stats(); st.Acked != total || st.Redelivered != 0 || st.InFlight != 0 || st.Visible != 0 {
		t.Fatalf("sub stats %+v", st)
	}
	if st := p.Stats(); st.Polled != total || st.Acked != total || st.Errors != 0 || st.InFlight != 0 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestInvalidArguments(t *testing.T) {
	_, _, sub := newBroker(t)
	h := func(context.Context, queue.Delivery[string]) error { return nil }
	cases := map[string][]poller.Option{
		"negative workers":              {poller.WithWorkers(-1)},
		"negative batch":                {poller.WithBatch(-1)},
		"negative max outstanding":      {poller.WithMaxOutstanding(-1)},
		"max outstanding below workers": {poller.WithWorkers(4), poller.WithMaxOutstanding(3)},
		"negative handler timeout":      {poller.WithHandlerTimeout(-time.Second)},
		"negative margin":               {poller.WithExtension(-time.Second, 0)},
		"negative extension limit":      {poller.WithExtension(0, -2)},
		"negative drain timeout":        {poller.WithDrainTimeout(-time.Second)},
		"nil clock":                     {poller.WithClock(nil)},
		"nil option":                    {nil},
		"observer of another type":      {poller.WithObserver(func(poller.Event[int]) {})},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := poller.New(sub, h, opts...)
			if !errors.Is(err, queue.ErrInvalidArgument) || p != nil {
				t.Fatalf("New: %v, %v; want an error matching ErrInvalidArgument", p, err)
			}
		})
	}
	if _, err := poller.New[string](nil, h); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("nil source: %v", err)
	}
	if _, err := poller.New(sub, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("nil handler: %v", err)
	}
	p, err := poller.New(sub, h, poller.WithWorkers(0), poller.WithExtension(0, poller.NoExtension), poller.WithLogger(nil), poller.WithObserver[string](nil))
	if err != nil {
		t.Fatalf("zero values: %v", err)
	}
	//lint:ignore SA1012 a nil context is what is being tested
	if err := p.Run(nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("Run(nil): %v", err)
	}
}

func TestRunTwice(t *testing.T) {
	_, b, sub := newBroker(t)
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	if err := p.Run(context.Background()); !errors.Is(err, poller.ErrRunning) {
		t.Fatalf("second Run: %v, want ErrRunning", err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// Once it has returned, Run may run again.
	r = start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	c := recv(t, calls)
	c.done <- nil
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Acked != 1 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestSourceClosed(t *testing.T) {
	_, b, sub := newBroker(t)
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	c := recv(t, calls)
	awaitParked(t, sub, 1) // polling with the free worker's slot
	b.Close()
	recv(t, c.ctx.Done()) // cancelled at once: nothing it does can be settled now
	if cause := context.Cause(c.ctx); !errors.Is(cause, queue.ErrClosed) {
		t.Fatalf("cause %v, want ErrClosed", cause)
	}
	c.done <- nil
	if err := r.wait(t); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Run: %v, want ErrClosed", err)
	}
	if st := p.Stats(); st.Errors != 1 || st.Acked != 0 { // the Ack failed
		t.Fatalf("poller stats %+v", st)
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

func TestIdempotentAcksDuplicateWithoutRunning(t *testing.T) {
	mock, b, sub := newBroker(t, broker.WithRetry(queue.RetryPolicy{Initial: time.Second}))
	ded, err := queue.NewDeduper(16)
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
	if e.Delivery.Attempt != 2 || !errors.Is(e.Err, queue.ErrInProgress) {
		t.Fatalf("attempt %d retried with %v, want attempt 2 failed as in progress", e.Delivery.Attempt, e.Err)
	}

	c.done <- nil // attempt 1 succeeds after all; its Ack is too late
	if e := ev.next(t, poller.OutcomeAcked); !errors.Is(e.SourceErr, queue.ErrLeaseExpired) {
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
	ded, _ := queue.NewDeduper(4)
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

// flakySource fails its first polls, recording when each poll came; the
// poll after them closes healthy and blocks.
type flakySource struct {
	plainSource
	fails   int
	at      []time.Time
	healthy chan struct{}
}

func (s *flakySource) Poll(ctx context.Context, n int) ([]queue.Delivery[string], error) {
	s.at = append(s.at, time.Now())
	if len(s.at) <= s.fails {
		return nil, errors.New("unavailable")
	}
	close(s.healthy)
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestPollErrorBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Inside the bubble the real clock is synctest's fake one: time
		// moves only when every goroutine is blocked, so gaps are exact.
		src := &flakySource{fails: 4, healthy: make(chan struct{})}
		p, err := poller.New[string](src, func(context.Context, queue.Delivery[string]) error { return nil },
			poller.WithClock(clock.New()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- p.Run(ctx) }()
		<-src.healthy
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(src.at) != 5 {
			t.Fatalf("%d polls, want 5", len(src.at))
		}
		var gaps []time.Duration
		for i := 1; i < len(src.at); i++ {
			gaps = append(gaps, src.at[i].Sub(src.at[i-1]))
		}
		want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
		if !slices.Equal(gaps, want) {
			t.Fatalf("gaps between polls %v, want %v", gaps, want)
		}
		if st := p.Stats(); st.Errors != 4 {
			t.Fatalf("poller stats %+v", st)
		}
	})
}

// A source's receipts are its own: the poller passes them back untouched.
func TestForeignSource(t *testing.T) {
	mock := clock.NewMock()
	src := &fakeSource{clock: mock, acked: make(chan lease.ID, 1)}
	p, err := poller.New[string](src, func(context.Context, queue.Delivery[string]) error { return nil }, poller.WithClock(mock))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	if got := recv(t, src.acked); got != lease.NewID(7, 42, 1) {
		t.Fatalf("acked %v", got)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// fakeSource hands out one delivery with its own lease ID, then blocks.
type fakeSource struct {
	plainSource
	clock  clock.Clock
	polled atomic.Bool
	acked  chan lease.ID
}

func (s *fakeSource) Poll(ctx context.Context, n int) ([]queue.Delivery[string], error) {
	if !s.polled.Swap(true) {
		return []queue.Delivery[string]{{LeaseID: lease.NewID(7, 42, 1), Attempt: 1, Deadline: s.clock.Now().Add(time.Minute)}}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *fakeSource) Ack(id lease.ID) error { s.acked <- id; return nil }

func TestIdempotentWithNilArgumentsIsAnInvalidHandler(t *testing.T) {
	ded, err := queue.NewDeduper(10)
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
