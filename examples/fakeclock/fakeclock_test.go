// Package fakeclock is a test to copy: it drives your own handler through
// retries, backoff and dead-lettering on a mock clock, deterministically
// and without a single sleep.
//
//	go test ./examples/fakeclock
//
// The recipe: build the broker on a mock clock (brokertest.New does it and
// closes the broker when the test ends), run your handler in a
// poller.Poller (it takes the subscription's clock), and between steps
// wait for two things before moving the clock: the outcome you expect (an
// observer event), and the pool at rest (Poller.AwaitQuiet: every worker
// waiting for work or in your handler, its Poll parked, none of its timers
// due), so that what the move does depends only on what the test did.
package fakeclock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// The code under test: a handler that sends an email through an SMTP
// client, which may be down.

type smtpClient struct {
	mu   sync.Mutex
	down bool
	sent []string
}

func (c *smtpClient) send(to string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return errors.New("smtp: 421 service not available")
	}
	c.sent = append(c.sent, to)
	return nil
}

func sendWelcome(c *smtpClient) poller.Handler[string] {
	return func(_ context.Context, d queue.Delivery[string]) error {
		return c.send(d.Payload)
	}
}

// harness runs h in a pool over sub (one worker unless opts say
// otherwise), on sub's clock, and reports each outcome on the returned
// channel.
func harness(t *testing.T, sub *broker.Subscription[string], h poller.Handler[string], opts ...poller.Option) (*poller.Poller[string], <-chan poller.Event[string]) {
	t.Helper()
	events := make(chan poller.Event[string], 16)
	opts = append(opts, poller.WithObserver(func(ev poller.Event[string]) { events <- ev }))
	pool, err := poller.New(sub, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RunPool(t, pool) // stopped when the test ends, within a bound of real time: never a hang
	return pool, events
}

// quiet waits until pool is at rest, before the test moves the clock.
func quiet(t *testing.T, pool *poller.Poller[string]) {
	t.Helper()
	if err := pool.AwaitQuiet(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func next(t *testing.T, events <-chan poller.Event[string], want poller.Outcome) poller.Event[string] {
	t.Helper()
	ev := <-events
	if ev.Outcome != want {
		t.Fatalf("outcome %v (attempt %d, err %v), want %v", ev.Outcome, ev.Delivery.Attempt, ev.Err, want)
	}
	return ev
}

func TestWelcomeEmailRetriedWithBackoffThenDelivered(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Second})))
	sub := brokertest.Subscribe(t, b, "signups", "welcome")
	smtp := &smtpClient{down: true}
	pool, events := harness(t, sub, sendWelcome(smtp))

	brokertest.Publish(t, b, "signups", "ada@example.com")
	ev := next(t, events, poller.OutcomeRetried) // attempt 1 fails at once
	if ev.Delivery.Attempt != 1 {
		t.Fatalf("attempt %d", ev.Delivery.Attempt)
	}

	quiet(t, pool)
	mock.Add(10*time.Second - time.Nanosecond) // backoff not over: nothing happens
	if st := sub.Stats(); st.Delayed != 1 {
		t.Fatalf("stats %+v", st)
	}

	smtp.mu.Lock()
	smtp.down = false // the server comes back
	smtp.mu.Unlock()
	mock.Add(time.Nanosecond) // backoff over: attempt 2
	ev = next(t, events, poller.OutcomeAcked)
	if ev.Delivery.Attempt != 2 || len(smtp.sent) != 1 {
		t.Fatalf("attempt %d, sent %v", ev.Delivery.Attempt, smtp.sent)
	}
}

// The same, written with brokertest's Recorder and Require helpers: they
// say what happened to one message, and wait for the pool where it has
// work to finish.
func TestWelcomeEmailDeadLetteredAfterMaxAttempts(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithMaxAttempts(3), broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Second, Multiplier: 2})))
	sub := brokertest.Subscribe(t, b, "signups", "welcome")
	rec := brokertest.NewRecorder[string]()
	pool, _ := harness(t, sub, sendWelcome(&smtpClient{down: true}), rec.Option())
	m := brokertest.Publish(t, b, "signups", "grace@example.com")[0]

	// Backoff doubles: 10s after attempt 1, 20s after attempt 2.
	for i, backoff := range []time.Duration{10 * time.Second, 20 * time.Second} {
		brokertest.RequireHandled(t, rec, m.ID, i+1) // attempt i+1 failed
		quiet(t, pool)
		mock.Add(backoff)
	}
	evs := brokertest.RequireHandled(t, rec, m.ID, 3)
	if evs[2].Outcome != poller.OutcomeDeadLettered { // attempt 3, the last: the pool sees it die
		t.Fatalf("attempt 3: %v", evs[2].Outcome)
	}
	dl := brokertest.RequireDeadLettered(t, b, m.ID, queue.ReasonMaxAttempts, "smtp: 421 service not available")
	if want := brokertest.Epoch.Add(30 * time.Second); dl.Attempts != 3 || !dl.At.Equal(want) {
		t.Errorf("dead-lettered after %d attempts at %v, want 3 at %v", dl.Attempts, dl.At, want)
	}
	brokertest.RequireQueued(t, sub, 0)
}

// A slow send keeps its lease however far the clock jumps, up to the
// pool's extension limit: the pool holds a subscription's lease for that
// whole allowance, so no other worker gets the message. Its handler
// timeout (WithHandlerTimeout) is armed before it starts: the Add that
// reaches it cancels the handler's context, and the failure is retried.
func TestSlowSendHoldsItsLeaseUntilItsTimeout(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(time.Minute)))
	sub := brokertest.Subscribe(t, b, "signups", "welcome")
	slowSMTP := func(ctx context.Context, d queue.Delivery[string]) error {
		if d.Attempt == 1 {
			<-ctx.Done() // the server never answers the first time
			return ctx.Err()
		}
		return nil
	}
	pool, events := harness(t, sub, slowSMTP, poller.WithWorkers(2), poller.WithHandlerTimeout(10*time.Minute))

	brokertest.Publish(t, b, "signups", "barbara@example.com")
	quiet(t, pool)                         // the handler runs; the other worker waits
	mock.Add(10*time.Minute - time.Second) // ten visibility timeouts, in one jump
	quiet(t, pool)
	if st := sub.Stats(); st.InFlight != 1 || st.Redelivered != 0 {
		t.Fatalf("stats %+v: the lease left its handler", st)
	}

	mock.Add(time.Second) // the handler's timeout
	ev := next(t, events, poller.OutcomeRetried)
	if !errors.Is(ev.Err, context.DeadlineExceeded) || ev.Delivery.Attempt != 1 {
		t.Fatalf("attempt %d failed with %v, want its timeout", ev.Delivery.Attempt, ev.Err)
	}
	quiet(t, pool)
	mock.Add(time.Second) // the subscription's retry backoff (1s by default)
	if ev := next(t, events, poller.OutcomeAcked); ev.Delivery.Attempt != 2 {
		t.Fatalf("acked attempt %d, want 2", ev.Delivery.Attempt)
	}
}

// With extension off (poller.NoExtension) a lease lasts the visibility
// timeout: a handler stuck past it loses its message to another worker.
func TestStuckHandlerLosesItsLease(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(time.Minute)))
	sub := brokertest.Subscribe(t, b, "signups", "welcome")
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	stuck := func(ctx context.Context, d queue.Delivery[string]) error {
		started <- struct{}{}
		if d.Attempt == 1 {
			<-release // hangs until the test ends
		}
		return nil
	}
	b2, err := poller.New(sub, stuck, poller.WithWorkers(2),
		poller.WithExtension(0, poller.NoExtension)) // the lease is not kept: it lapses
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b2.Run(ctx) }()
	defer func() { close(release); cancel(); <-done }()

	brokertest.Publish(t, b, "signups", "linus@example.com")
	<-started
	if err := b2.AwaitQuiet(ctx); err != nil { // the stuck handler runs; the other worker waits
		t.Fatal(err)
	}
	mock.Add(time.Minute) // the first worker's lease expires
	<-started             // and the message is delivered again
	if st := sub.Stats(); st.Redelivered != 1 {
		t.Fatalf("stats %+v", st)
	}
}
