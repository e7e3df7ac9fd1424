// Package signup_test is the README's second quick start: a handler's
// retry, tested on a mock clock to the nanosecond.
package signup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// The mail server is down on the first attempt: the handler's error retries
// the message after the subscription's backoff, which the test passes with
// one move of the clock. No sleep anywhere.
func TestWelcomeIsRetried(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(
		broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Second})))
	sub := brokertest.Subscribe(t, b, "signups", "welcome")
	rec := brokertest.NewRecorder[string]()
	pool, err := poller.New(sub, func(_ context.Context, d queue.Delivery[string]) error {
		if d.Attempt == 1 {
			return errors.New("smtp: 421 try again later")
		}
		return nil
	}, rec.Option())
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RunPool(t, pool) // stopped when the test ends: a forgotten wait fails, never hangs

	m := brokertest.Publish(t, b, "signups", "ada@example.com")[0]
	brokertest.RequireHandled(t, rec, m.ID, 1)           // attempt 1 failed
	if err := pool.AwaitQuiet(t.Context()); err != nil { // the pool at rest before the clock moves
		t.Fatal(err)
	}
	mock.Add(10 * time.Second) // the backoff, to the nanosecond
	if d := brokertest.RequireAcked(t, rec, m.ID); d.Attempt != 2 {
		t.Fatalf("acked on attempt %d, want 2", d.Attempt)
	}
}
