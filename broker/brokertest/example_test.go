package brokertest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// exampleT stands in for a test's *testing.T, so that these examples run
// as they would in a test: a failure is printed.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()          {}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(format string, args ...any) {
	fmt.Printf("FAIL: "+format+"\n", args...)
}

// end runs the cleanups, as a test's end does.
func (t *exampleT) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// runPool runs a pool over sub with h, recorded by rec, until the test
// ends (brokertest.RunPool).
func runPool(t *exampleT, sub *broker.Subscription[string], h poller.Handler[string], rec *brokertest.Recorder[string]) *poller.Poller[string] {
	pool, err := poller.New(sub, h, rec.Option())
	if err != nil {
		t.Fatalf("poller.New: %v", err)
	}
	brokertest.RunPool(t, pool)
	return pool
}

var errDown = errors.New("smtp: 421 service not available")

// A handler fails its first attempt and succeeds after the subscription's
// retry backoff, which the test passes with one move of the clock.
func ExampleRequireAcked() {
	t := &exampleT{}
	defer t.end()
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithRetry(queue.RetryPolicy{Initial: 10 * time.Second})))
	sub := brokertest.Subscribe(t, b, "signups", "welcome")
	rec := brokertest.NewRecorder[string]()
	pool := runPool(t, sub, func(_ context.Context, d queue.Delivery[string]) error {
		if d.Attempt == 1 {
			return errDown
		}
		return nil
	}, rec)

	m := brokertest.Publish(t, b, "signups", "ada@example.com")[0]
	brokertest.RequireHandled(t, rec, m.ID, 1) // attempt 1 failed
	if err := pool.AwaitQuiet(context.Background()); err != nil {
		t.Fatalf("AwaitQuiet: %v", err)
	}
	mock.Add(10 * time.Second) // the backoff
	d := brokertest.RequireAcked(t, rec, m.ID)
	fmt.Println("acked on attempt", d.Attempt)
	// Output: acked on attempt 2
}

// Every attempt fails: after the last one the message is a dead letter,
// with the handler's error.
func ExampleRequireDeadLettered() {
	t := &exampleT{}
	defer t.end()
	b, _ := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithMaxAttempts(1)))
	sub := brokertest.Subscribe(t, b, "signups", "welcome")
	rec := brokertest.NewRecorder[string]()
	runPool(t, sub, func(context.Context, queue.Delivery[string]) error { return errDown }, rec)

	m := brokertest.Publish(t, b, "signups", "grace@example.com")[0]
	evs := brokertest.RequireHandled(t, rec, m.ID, 1)
	fmt.Println("the pool saw:", evs[0].Outcome)
	dl := brokertest.RequireDeadLettered(t, b, m.ID, queue.ReasonMaxAttempts, errDown.Error())
	fmt.Println("dead after", dl.Attempts, "attempt:", dl.LastError)
	// Output:
	// the pool saw: dead-lettered
	// dead after 1 attempt: smtp: 421 service not available
}

// A message published with a delay waits in the subscription, delivered to
// no one, until the clock reaches it. The failure shows what a wrong count
// prints.
func ExampleRequireQueued() {
	t := &exampleT{}
	defer t.end()
	b, _ := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "signups", "welcome")
	if _, err := b.Publish(context.Background(), "signups", "later", broker.WithDelay(time.Hour)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	brokertest.RequireQueued(t, sub, 1)
	brokertest.RequireNothingDelivered(t, sub)
	brokertest.RequireQueued(t, sub, 0) // fails: it is still there
	// Output:
	// FAIL: brokertest.RequireQueued: signups/welcome holds 1 messages (visible 0, delayed 1, held back 0, in flight 0), want 0
}

// A filter keeps a subscription's handler from ever seeing what it does
// not want.
func ExampleRequireNothingDelivered() {
	t := &exampleT{}
	defer t.end()
	b, _ := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "signups", "vip",
		broker.WithFilter(func(m queue.Message[string]) bool { return m.Headers.Get("tier") == "vip" }))
	brokertest.Publish(t, b, "signups", "an ordinary signup")
	brokertest.RequireNothingDelivered(t, sub)
	brokertest.RequireQueued(t, sub, 0)
	fmt.Println("nothing for vip")
	// Output: nothing for vip
}

// A handler's fake of a slow partner waits a second of the test's time on
// a WaitClock over the mock; AwaitWaiting before each move of the clock
// waits until the pool is at rest and the running handler is at its wait,
// so each call starts exactly when the one before it ended.
func ExampleAwaitWaiting() {
	t := &exampleT{}
	defer t.end()
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "invoices", "partner")
	w := brokertest.NewWaitClock(mock)
	start := mock.Now()
	var calls []string
	pool, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		calls = append(calls, fmt.Sprintf("%v %s", w.Since(start), d.Payload)) // one worker: one call at a time
		select {
		case <-w.After(time.Second): // the partner's call
		case <-ctx.Done():
		}
		return nil
	})
	if err != nil {
		t.Fatalf("poller.New: %v", err)
	}
	brokertest.RunPool(t, pool)
	brokertest.Publish(t, b, "invoices", "i1", "i2", "i3")
	for range 4 {
		brokertest.AwaitWaiting(t, pool, w)
		mock.Add(time.Second)
	}
	brokertest.AwaitWaiting(t, pool, w)
	fmt.Println(calls)
	// Output: [0s i1 1s i2 2s i3]
}
