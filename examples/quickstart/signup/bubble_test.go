package signup_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// The same test inside testing/synctest: the broker on the real clock,
// which the bubble makes virtual. Time moves only when every goroutine
// waits, so a handler that itself waits on time (a slow fake, a sleep)
// is exact too, and synctest.Wait says when the pool is at rest.
func TestWelcomeIsRetriedInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := brokertest.NewReal[string](t, broker.WithSubscriptionDefaults(
			broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Second})))
		sub := brokertest.Subscribe(t, b, "signups", "welcome")
		var tries []time.Duration
		start := time.Now()
		pool, err := poller.New(sub, func(_ context.Context, d queue.Delivery[string]) error {
			tries = append(tries, time.Since(start))
			time.Sleep(time.Second) // the mail server takes a second to answer
			if d.Attempt == 1 {
				return errors.New("smtp: 421 try again later")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		brokertest.RunPool(t, pool)

		brokertest.Publish(t, b, "signups", "ada@example.com")
		time.Sleep(time.Minute) // a minute of the bubble's time, at once
		synctest.Wait()         // every goroutine waits: the pool is at rest
		// Attempt 1 at 0 fails after its second; the backoff's 10s later, at
		// 11s, attempt 2 succeeds.
		if len(tries) != 2 || tries[0] != 0 || tries[1] != 11*time.Second {
			t.Fatalf("attempts at %v, want [0s 11s]", tries)
		}
		if st := sub.Stats(); st.Acked != 1 {
			t.Fatalf("%+v, want the message acked", st)
		}
	})
}
