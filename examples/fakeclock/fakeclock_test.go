// Package fakeclock is a test to copy: it drives your own handler through
// retries, backoff and dead-lettering on a mock clock, deterministically
// and without a single sleep.
//
//	go test ./examples/fakeclock
//
// The recipe: build the broker on a mock clock (brokertest.New does it and
// closes the broker when the test ends), run your handler in a
// poller.Poller on the same clock, and between steps wait for two things
// before moving the clock: the outcome you expect (an observer event), and
// the poller parked in Poll (Subscription.AwaitParked), so the move is sure
// to wake it.
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

// harness runs h in a one-worker pool on b's mock clock and reports each
// outcome on the returned channel.
func harness(t *testing.T, b *broker.Broker[string], sub *broker.Subscription[string], h poller.Handler[string]) <-chan poller.Event[string] {
	t.Helper()
	events := make(chan poller.Event[string], 16)
	pool, err := poller.New(sub, h,
		poller.WithClock(b.Clock()),
		poller.WithObserver(func(ev poller.Event[string]) { events <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return events
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
	b, mock := brokertest.New[string](t, broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Second}))
	sub := brokertest.Subscribe(t, b, "signups", "welcome")
	smtp := &smtpClient{down: true}
	events := harness(t, b, sub, sendWelcome(smtp))

	brokertest.Publish(t, b, "signups", "ada@example.com")
	ev := next(t, events, poller.OutcomeRetried) // attempt 1 fails at once
	if ev.Delivery.Attempt != 1 {
		t.Fatalf("attempt %d", ev.Delivery.Attempt)
	}

	brokertest.AwaitParked(t, sub, 1)
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

func TestWelcomeEmailDeadLetteredAfterMaxAttempts(t *testing.T) {
	b, mock := brokertest.New[string](t,
		broker.WithMaxAttempts(3), broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Second, Multiplier: 2}))
	sub := brokertest.Subscribe(t, b, "signups", "welcome")
	events := harness(t, b, sub, sendWelcome(&smtpClient{down: true}))
	brokertest.Publish(t, b, "signups", "grace@example.com")

	// Backoff doubles: 10s after attempt 1, 20s after attempt 2.
	for _, backoff := range []time.Duration{10 * time.Second, 20 * time.Second} {
		next(t, events, poller.OutcomeRetried)
		brokertest.AwaitParked(t, sub, 1)
		mock.Add(backoff)
	}
	next(t, events, poller.OutcomeDeadLettered) // attempt 3, the last: the pool sees it die

	dls := b.DeadLetters()
	if len(dls) != 1 {
		t.Fatalf("dead letters: %+v", dls)
	}
	dl := dls[0]
	if dl.Reason != queue.ReasonMaxAttempts || dl.Attempts != 3 || dl.LastError != "smtp: 421 service not available" {
		t.Errorf("dead letter %+v", dl)
	}
	if want := brokertest.Epoch.Add(30 * time.Second); !dl.At.Equal(want) {
		t.Errorf("dead-lettered at %v, want %v", dl.At, want)
	}
}

func TestStuckHandlerLosesItsLease(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithVisibilityTimeout(time.Minute))
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
	b2, err := poller.New(sub, stuck, poller.WithClock(mock), poller.WithWorkers(2),
		poller.WithExtension(0, poller.NoExtension)) // no automatic extension: the lease lapses
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b2.Run(ctx) }()
	defer func() { close(release); cancel(); <-done }()

	brokertest.Publish(t, b, "signups", "linus@example.com")
	<-started
	brokertest.AwaitParked(t, sub, 1) // the pool's one Poll, for its idle worker, is parked
	mock.Add(time.Minute)             // the first worker's lease expires
	<-started                         // and the message is delivered again
	if st := sub.Stats(); st.Redelivered != 1 {
		t.Fatalf("stats %+v", st)
	}
}
