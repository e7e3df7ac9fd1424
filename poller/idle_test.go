package poller_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Both of leasebus's own sources can say when they are idle.
var (
	_ backend.IdleAwaiter = (*broker.Subscription[string])(nil)
	_ backend.IdleAwaiter = (*core.Queue[string])(nil)
)

// startUntilIdle runs p.RunUntilIdle(ctx) in the background.
func startUntilIdle[T any](t *testing.T, ctx context.Context, p *poller.Poller[T]) *running {
	t.Helper()
	return startRun(t, ctx, p.RunUntilIdle)
}

// outcomes receives n events and returns, by payload, the outcomes seen in
// order.
func outcomes(t *testing.T, ev *events[string], n int) map[string][]poller.Outcome {
	t.Helper()
	got := map[string][]poller.Outcome{}
	for range n {
		e := recv(t, ev.ch)
		if e.SourceErr != nil {
			t.Fatalf("%v of %q: source error %v", e.Outcome, e.Delivery.Payload, e.SourceErr)
		}
		got[e.Delivery.Payload] = append(got[e.Delivery.Payload], e.Outcome)
	}
	return got
}

func wantOutcomes(t *testing.T, step string, got map[string][]poller.Outcome, want map[string][]poller.Outcome) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: outcomes %v, want %v", step, got, want)
	}
}

// RunUntilIdle waits through publish delays and retry backoffs on the mock
// clock, and returns only when every message is acked or dead-lettered.
func TestRunUntilIdleWaitsForDelaysAndRetries(t *testing.T) {
	mock, b, sub := newBroker(t,
		broker.WithMaxAttempts(3),
		broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Second})) // 10s, then 20s
	failed := map[string]bool{}
	h := func(_ context.Context, d queue.Delivery[string]) error {
		switch {
		case d.Payload == "poison":
			return errors.New("always")
		case d.Payload == "flaky" && !failed[d.Payload]: // one worker: no race on failed
			failed[d.Payload] = true
			return errors.New("once")
		}
		return nil
	}
	ev := newEvents[string]()
	p, err := poller.New(sub, h, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "flaky", "poison")
	if _, err := b.Publish(context.Background(), "jobs", "later", broker.WithDelay(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := startUntilIdle(t, context.Background(), p)

	// t=0: a is done; flaky and poison wait out their first backoff (10s),
	// later its delay (30s).
	wantOutcomes(t, "t=0", outcomes(t, ev, 3), map[string][]poller.Outcome{
		"a": {poller.OutcomeAcked}, "flaky": {poller.OutcomeRetried}, "poison": {poller.OutcomeRetried},
	})
	awaitParked(t, sub, 1)
	if r.returned() {
		t.Fatalf("returned %v with work left: %+v", r.err, sub.Stats())
	}
	mock.Add(10 * time.Second)

	// t=10s: flaky succeeds; poison fails again and waits 20s.
	wantOutcomes(t, "t=10s", outcomes(t, ev, 2), map[string][]poller.Outcome{
		"flaky": {poller.OutcomeAcked}, "poison": {poller.OutcomeRetried},
	})
	awaitParked(t, sub, 1)
	if r.returned() {
		t.Fatalf("returned %v with work left: %+v", r.err, sub.Stats())
	}
	if st := sub.Stats(); st.Delayed != 2 || st.Visible+st.InFlight+st.HeldBack != 0 {
		t.Fatalf("t=10s: %+v, want later and poison delayed", st)
	}
	mock.Add(20 * time.Second)

	// t=30s: later is done; poison's last attempt fails: dead-lettered.
	wantOutcomes(t, "t=30s", outcomes(t, ev, 2), map[string][]poller.Outcome{
		"later": {poller.OutcomeAcked}, "poison": {poller.OutcomeDeadLettered},
	})
	if err := r.wait(t); err != nil {
		t.Fatalf("RunUntilIdle = %v, want nil", err)
	}
	st := sub.Stats()
	if st.Acked != 3 || st.DeadLettered != 1 || st.Visible+st.Delayed+st.InFlight+st.HeldBack != 0 {
		t.Fatalf("subscription stats %+v", st)
	}
	if ps := p.Stats(); ps.Acked != 3 || ps.Retried != 3 || ps.DeadLettered != 1 || ps.InFlight != 0 || ps.Released != 0 {
		t.Fatalf("poller stats %+v", ps)
	}
	if dls := b.DeadLetters(); len(dls) != 1 || dls[0].Message.Payload != "poison" || dls[0].Attempts != 3 {
		t.Fatalf("dead letters %+v", dls)
	}
	ev.none(t)
}

// A handler that publishes follow-up work to its own subscription before
// it returns keeps the run going: the follow-up is held before the
// handler's lease is acked, so the subscription is never idle between.
func TestRunUntilIdleSeesFollowUpsPublishedByHandlers(t *testing.T) {
	_, b, sub := newBroker(t)
	const chains, depth = 8, 5
	h := func(ctx context.Context, d queue.Delivery[string]) error {
		chain, step, _ := strings.Cut(d.Payload, "/")
		n, err := strconv.Atoi(step)
		if err != nil {
			return poller.GiveUp(err)
		}
		if n+1 < depth {
			_, err = b.Publish(ctx, "jobs", chain+"/"+strconv.Itoa(n+1))
		}
		return err
	}
	p, err := poller.New(sub, h, poller.WithWorkers(4), poller.WithMaxOutstanding(6))
	if err != nil {
		t.Fatal(err)
	}
	for c := range chains {
		publish(t, b, fmt.Sprintf("c%d/0", c))
	}
	if err := p.RunUntilIdle(context.Background()); err != nil {
		t.Fatalf("RunUntilIdle = %v", err)
	}
	st := sub.Stats()
	if st.Published != chains*depth || st.Acked != chains*depth || st.Visible+st.Delayed+st.InFlight != 0 {
		t.Fatalf("stats %+v, want all %d messages, follow-ups included, acked", st, chains*depth)
	}
}

func TestRunUntilIdleEmptyReturnsAtOnce(t *testing.T) {
	_, _, sub := newBroker(t)
	p, err := poller.New(sub, func(context.Context, queue.Delivery[string]) error { return nil }, poller.WithWorkers(3))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunUntilIdle(context.Background()); err != nil {
		t.Fatalf("RunUntilIdle on an empty subscription = %v", err)
	}
	if st := p.Stats(); st.Polled != 0 || st.InFlight != 0 {
		t.Fatalf("poller stats %+v", st)
	}
	// It may run again.
	if err := p.RunUntilIdle(context.Background()); err != nil {
		t.Fatalf("second RunUntilIdle = %v", err)
	}
}

// A core.Queue is a source too.
func TestRunUntilIdleOnAQueue(t *testing.T) {
	q, err := core.New[int](queue.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for i := range 10 {
		if err := q.Offer(context.Background(), &queue.Message[int]{Payload: i}, 0); err != nil {
			t.Fatal(err)
		}
	}
	p, err := poller.New(q, func(context.Context, queue.Delivery[int]) error { return nil }, poller.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Acked != 10 {
		t.Fatalf("stats %+v", st)
	}
}

// When ctx ends first RunUntilIdle drains as Run does and returns ctx's
// error: the work is not done.
func TestRunUntilIdleContextEnds(t *testing.T) {
	_, b, sub := newBroker(t)
	if _, err := b.Publish(context.Background(), "jobs", "later", broker.WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithWorkers(2), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := startUntilIdle(t, ctx, p)
	publish(t, b, "now")
	c := recv(t, calls)
	awaitParked(t, sub, 1) // the other worker's Poll waits for later
	cancel()
	if c.ctx.Err() != nil {
		t.Fatal("the handler's context was cancelled with the run's: a drain lets it finish")
	}
	c.done <- nil // the running handler finishes during the drain
	ev.next(t, poller.OutcomeAcked)
	if err := r.wait(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("RunUntilIdle = %v, want context.Canceled", err)
	}
	if st := sub.Stats(); st.Delayed != 1 || st.Acked != 1 {
		t.Fatalf("stats %+v, want later still delayed", st)
	}

	// A context done before the call: nothing is polled.
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := p.RunUntilIdle(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("RunUntilIdle(done ctx) = %v, want context.Canceled", err)
	}
}

// The source closes during the run: RunUntilIdle returns an error matching
// queue.ErrClosed, with every worker busy (only the idle wait can tell) or
// one polling.
func TestRunUntilIdleSourceCloses(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			_, b, sub := newBroker(t)
			started := make(chan struct{}, 1)
			h := func(ctx context.Context, _ queue.Delivery[string]) error {
				started <- struct{}{}
				<-ctx.Done() // cancelled when the source closes
				return context.Cause(ctx)
			}
			p, err := poller.New(sub, h, poller.WithWorkers(workers))
			if err != nil {
				t.Fatal(err)
			}
			publish(t, b, "held")
			r := startUntilIdle(t, context.Background(), p)
			recv(t, started)
			awaitParked(t, sub, workers-1)
			if err := b.Unsubscribe("jobs", "workers"); err != nil {
				t.Fatal(err)
			}
			if err := r.wait(t); !errors.Is(err, queue.ErrClosed) {
				t.Fatalf("RunUntilIdle = %v, want ErrClosed", err)
			}
			// Closed before the call: at once.
			if err := p.RunUntilIdle(context.Background()); !errors.Is(err, queue.ErrClosed) {
				t.Fatalf("RunUntilIdle on a closed source = %v, want ErrClosed", err)
			}
		})
	}
}

// plainSource (poller_test.go) has no AwaitIdle.
func TestRunUntilIdleNeedsIdleAwaiter(t *testing.T) {
	_, _, sub := newBroker(t)
	p, err := poller.New[string](plainSource{sub}, func(context.Context, queue.Delivery[string]) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunUntilIdle(context.Background()); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("RunUntilIdle without backend.IdleAwaiter = %v, want ErrInvalidArgument", err)
	}
	var noCtx context.Context // a nil context, on purpose
	if err := p.RunUntilIdle(noCtx); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("RunUntilIdle(nil) = %v, want ErrInvalidArgument", err)
	}
	if st := p.Stats(); st.Polled != 0 {
		t.Fatalf("polled %d", st.Polled)
	}
}

func TestRunUntilIdleWhileRunning(t *testing.T) {
	_, _, sub := newBroker(t)
	p, err := poller.New(sub, func(context.Context, queue.Delivery[string]) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	if err := p.RunUntilIdle(context.Background()); !errors.Is(err, poller.ErrRunning) {
		t.Fatalf("RunUntilIdle during Run = %v, want ErrRunning", err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// An AwaitIdle that fails (a backend's error) stops the run, which drains
// and returns the error.
type failingIdle struct {
	*broker.Subscription[string]
	err error
}

func (f failingIdle) AwaitIdle(context.Context) error { return f.err }

func (f failingIdle) AwaitIdleFor(context.Context, *backend.Parking) error { return f.err }

func TestRunUntilIdleAwaitIdleFails(t *testing.T) {
	_, _, sub := newBroker(t)
	boom := errors.New("backend down")
	p, err := poller.New[string](failingIdle{sub, boom}, func(context.Context, queue.Delivery[string]) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunUntilIdle(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("RunUntilIdle = %v, want %v", err, boom)
	}
}

// A handler that fails every attempt: retried, retried, then dead-lettered
// on the last attempt, whether it fails (Fail) or asks for a retry (Nack).
func TestFailureOnLastAttemptIsDeadLettered(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"fail", errors.New("always")},
		{"retry after", poller.RetryAfter(5*time.Second, errors.New("always"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock, b, sub := newBroker(t, broker.WithMaxAttempts(3), broker.WithRetry(queue.RetryPolicy{Initial: 5 * time.Second, Multiplier: 1}))
			ev := newEvents[string]()
			p, err := poller.New(sub, func(context.Context, queue.Delivery[string]) error { return tc.err }, ev.option())
			if err != nil {
				t.Fatal(err)
			}
			r := start(t, p)
			publish(t, b, "x")
			for attempt := 1; attempt <= 3; attempt++ {
				want := poller.OutcomeRetried
				if attempt == 3 {
					want = poller.OutcomeDeadLettered
				}
				e := ev.next(t, want)
				if d := e.Delivery; d.Attempt != attempt || d.MaxAttempts != 3 || e.SourceErr != nil || e.Err == nil {
					t.Fatalf("event %v: attempt %d of %d, err %v, source err %v", e.Outcome, d.Attempt, d.MaxAttempts, e.Err, e.SourceErr)
				}
				if attempt < 3 {
					awaitParked(t, sub, 1)
					mock.Add(5 * time.Second)
				}
			}
			if st := p.Stats(); st.Retried != 2 || st.DeadLettered != 1 || st.Errors != 0 {
				t.Fatalf("poller stats %+v", st)
			}
			if dls := b.DeadLetters(); len(dls) != 1 || dls[0].Reason != queue.ReasonMaxAttempts || dls[0].Attempts != 3 {
				t.Fatalf("dead letters %+v", dls)
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			ev.none(t)
		})
	}
}

// A Nack the source refuses (the lease lapsed) is OutcomeSettleFailed,
// with its SourceErr and the handler's error: the poller retried nothing
// and dead-lettered nothing.
func TestRefusedSettleOnLastAttemptIsNotDeadLettered(t *testing.T) {
	src := &refusingSource{}
	ev := newEvents[string]()
	p, err := poller.New[string](src, func(context.Context, queue.Delivery[string]) error { return errors.New("boom") }, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	e := ev.next(t, poller.OutcomeSettleFailed)
	if !errors.Is(e.SourceErr, queue.ErrLeaseExpired) || e.Err == nil || e.Err.Error() != "boom" {
		t.Fatalf("source err %v, handler err %v", e.SourceErr, e.Err)
	}
	cancel()
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.DeadLettered != 0 || st.Retried != 0 || st.Errors != 1 {
		t.Fatalf("poller stats %+v", st)
	}
}

// refusingSource delivers one message on its last attempt, then blocks;
// every settling call fails with ErrLeaseExpired.
type refusingSource struct{ polled bool }

func (s *refusingSource) Poll(ctx context.Context, _ int) ([]queue.Delivery[string], error) {
	if !s.polled { // one poll loop: no race
		s.polled = true
		return []queue.Delivery[string]{{
			Message: queue.Message[string]{Payload: "x"}, LeaseID: lease.NewID(1, 1, 3), Attempt: 3, MaxAttempts: 3,
		}}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (*refusingSource) Ack(lease.ID) error                   { return queue.ErrLeaseExpired }
func (*refusingSource) Nack(lease.ID, time.Duration) error   { return queue.ErrLeaseExpired }
func (*refusingSource) Fail(lease.ID, error) error           { return queue.ErrLeaseExpired }
func (*refusingSource) Extend(lease.ID, time.Duration) error { return queue.ErrLeaseExpired }
func (*refusingSource) Release(lease.ID) error               { return queue.ErrLeaseExpired }

// RunUntilIdle ends when a delayed message's TTL dead-letters it, not when
// its delay would have passed: a parked Poll wakes for the earliest of
// both (it woke for the delay only). On the real clock in a synctest
// bubble, where time moves only when every goroutine waits.
func TestRunUntilIdleWakesForTheTTLOfADelayedMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, sub := newBrokerOn(t, clock.New())
		if _, err := b.Publish(context.Background(), "jobs", "x", broker.WithDelay(4*time.Second), broker.WithTTL(50*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		p, err := poller.New(sub, func(context.Context, queue.Delivery[string]) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := p.RunUntilIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= 4*time.Second {
			t.Fatalf("RunUntilIdle took %v: it waited out the delay of a message its TTL had dead-lettered at 50ms", took)
		}
		if dls := b.DeadLetters(); len(dls) != 1 || dls[0].Reason != queue.ReasonExpired {
			t.Fatalf("dead letters %+v", dls)
		}
	})
}

// A handler that outlives its lease (extension off) still runs when the
// message, delivered again to another worker and acked there, leaves the
// subscription idle. The run is not done: the slow handler publishes a
// follow-up before it returns, and RunUntilIdle handles that too before it
// returns nil. (It used to stop at the subscription's idle moment, drain,
// and return nil with the follow-up visible.)
func TestRunUntilIdleWaitsForAHandlerThatOutlivedItsLease(t *testing.T) {
	mock, b, sub := newBroker(t) // visibility 10s
	runOutlivedLease(t, "", mock, b, sub)
}

// runOutlivedLease runs the scenario of
// TestRunUntilIdleWaitsForAHandlerThatOutlivedItsLease on sub (10s
// visibility, nothing in it), its failures prefixed with where.
func runOutlivedLease(t *testing.T, where string, mock *clock.Mock, b *broker.Broker[string], sub *broker.Subscription[string]) {
	t.Helper()
	ev := newEvents[string]()
	calls := make(chan handlerCall, 2)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithWorkers(2),
		poller.WithExtension(0, poller.NoExtension), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "first")
	r := startUntilIdle(t, context.Background(), p)
	slow := recv(t, calls)
	awaitQuiet(t, p)
	mock.Add(10 * time.Second) // the slow handler's lease lapses
	again := recv(t, calls)
	if again.d.Attempt != 2 {
		t.Fatalf("%sredelivery: attempt %d, want 2", where, again.d.Attempt)
	}
	again.done <- nil
	ev.next(t, poller.OutcomeAcked) // the subscription is idle; the slow handler runs on
	awaitQuiet(t, p)                // RunUntilIdle's watcher has seen the idle subscription
	publish(t, b, "follow-up")      // as the slow handler's last act
	slow.done <- nil
	if e := ev.next(t, poller.OutcomeSettleFailed); !errors.Is(e.SourceErr, queue.ErrLeaseNotFound) {
		t.Fatalf("%sthe slow handler's Ack: %v, want ErrLeaseNotFound (the message was acked)", where, e.SourceErr)
	}
	follow := recv(t, calls)
	if follow.d.Payload != "follow-up" {
		t.Fatalf("%shandled %q, want the follow-up", where, follow.d.Payload)
	}
	follow.done <- nil
	if err := r.wait(t); err != nil {
		t.Fatalf("%sRunUntilIdle: %v", where, err)
	}
	if st := sub.Stats(); st.Visible != 0 || st.InFlight != 0 || st.Acked != 2 {
		t.Fatalf("%safter RunUntilIdle: %+v, want both messages acked", where, st)
	}
}
