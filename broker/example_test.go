package broker_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/rapidseed"
	"github.com/leasebus/leasebus/queue"
)

// TestMain pins rapid's seed (unless the caller names one):
// TestBrokerModel asserts what its runs cover, so they must be the same runs
// every time.
func TestMain(m *testing.M) {
	flag.Parse()
	rapidseed.Pin(20261202)
	goleak.VerifyTestMain(m)
}

// The main flow: publish, poll a batch, ack each.
func Example() {
	ctx := context.Background()
	b, _ := broker.New[string]()
	defer b.Close()

	b.CreateTopic("emails")
	sub, _ := b.Subscribe("emails", "sender")
	b.Publish(ctx, "emails", "welcome alice")
	b.Publish(ctx, "emails", "password reset bob", broker.WithPriority(queue.PriorityHigh))

	ds, _ := sub.Poll(ctx, 10)
	for _, d := range ds {
		fmt.Println(d.Payload, "attempt", d.Attempt)
		sub.Ack(d.LeaseID)
	}
	fmt.Println(sub.Stats())
	// Output:
	// password reset bob attempt 1
	// welcome alice attempt 1
	// visible=0 delayed=0 in-flight=0 held-back=0 published=2 delivered=2 acked=2 redelivered=0 dead-lettered=0 dropped=0 redriven=0 publishes-refused=0 oldest-visible=0s
}

// An unsettled lease expires on the mock clock and the message comes back
// with its attempt raised; past MaxAttempts it is dead-lettered.
func Example_redelivery() {
	mock := clock.NewMock()
	b, _ := broker.New[string](broker.WithClock(mock), broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(30*time.Second), broker.WithMaxAttempts(2)))
	defer b.Close()
	b.CreateTopic("jobs")
	sub, _ := b.Subscribe("jobs", "workers")
	b.Publish(context.Background(), "jobs", "resize photo.jpg")

	first := sub.TryPoll(1)[0]
	mock.Add(30 * time.Second) // the worker died: its lease expires
	second := sub.TryPoll(1)[0]
	fmt.Println(second.Payload, "attempt", second.Attempt)
	fmt.Println("stale ack:", sub.Ack(first.LeaseID) != nil)

	mock.Add(30 * time.Second) // and again: that was the last attempt
	for _, dl := range b.DeadLetters() {
		fmt.Println(dl.Message.Payload, dl.Reason, dl.Attempts, dl.LastError)
	}
	// Output:
	// resize photo.jpg attempt 2
	// stale ack: true
	// resize photo.jpg max-attempts 2 lease expired
}

// Fail reports an error: the message waits out the retry policy's backoff,
// and the dead letter keeps the last error. Redrive puts it back.
func ExampleBroker_Redrive() {
	mock := clock.NewMock()
	b, _ := broker.New[string](broker.WithClock(mock), broker.WithSubscriptionDefaults(broker.WithMaxAttempts(2), broker.WithRetry(queue.RetryPolicy{Initial: time.Second})))
	defer b.Close()
	b.CreateTopic("webhooks")
	sub, _ := b.Subscribe("webhooks", "deliver")
	b.Publish(context.Background(), "webhooks", "POST https://example.com/hook")

	d := sub.TryPoll(1)[0]
	sub.Fail(d.LeaseID, errors.New("503 Service Unavailable"))
	fmt.Println("visible during backoff:", len(sub.TryPoll(1)))
	mock.Add(time.Second)
	d = sub.TryPoll(1)[0]
	sub.Fail(d.LeaseID, errors.New("503 Service Unavailable"))

	dls := b.DeadLetters()
	fmt.Println(dls[0].Reason, dls[0].Attempts, dls[0].LastError)

	n, _ := b.Redrive(func(dl queue.DeadLetter[string]) bool { return dl.Reason == queue.ReasonMaxAttempts })
	d = sub.TryPoll(1)[0]
	fmt.Println("redriven:", n, "attempt", d.Attempt)
	// Output:
	// visible during backoff: 0
	// max-attempts 2 503 Service Unavailable
	// redriven: 1 attempt 1
}

// Dead letters can go to a topic instead of the broker's store, for a
// consumer of their own; DeadLetterOf reads one back.
func ExampleDeadLetterOf() {
	ctx := context.Background()
	b, _ := broker.New[string](broker.WithSubscriptionDefaults(broker.WithMaxAttempts(1)))
	defer b.Close()
	b.CreateTopic("payments")
	b.CreateTopic("payments.dead")
	charge, _ := b.Subscribe("payments", "charge", broker.WithDeadLetterTopic("payments.dead"))
	ops, _ := b.Subscribe("payments.dead", "ops")
	b.Publish(ctx, "payments", "charge #42", broker.WithHeaders(map[string]string{"tenant": "acme"}))

	d := charge.TryPoll(1)[0]
	charge.Fail(d.LeaseID, errors.New("card declined"))

	for _, d := range ops.TryPoll(10) {
		dl, ok := broker.DeadLetterOf(d.Message)
		fmt.Println(ok, dl.Message.Payload, dl.Message.Headers.Get("tenant"), "from", dl.Message.Topic+"/"+dl.Subscription)
		fmt.Println(dl.Reason, "after", dl.Attempts, "attempt:", dl.LastError)
		ops.Ack(d.LeaseID)
	}
	fmt.Println("in the store:", len(b.DeadLetters()))
	// Output:
	// true charge #42 acme from payments/charge
	// max-attempts after 1 attempt: card declined
	// in the store: 0
}

// A filter decides which messages a subscription accepts; its type
// parameter is inferred from the function.
func ExampleWithFilter() {
	type order struct {
		ID     int
		Amount int
	}
	b, _ := broker.New[order]()
	defer b.Close()
	b.CreateTopic("orders")
	big, _ := b.Subscribe("orders", "fraud-check", broker.WithFilter(func(m queue.Message[order]) bool {
		return m.Payload.Amount >= 1000
	}))
	for i, amount := range []int{20, 5000, 300, 1200} {
		b.Publish(context.Background(), "orders", order{ID: i, Amount: amount})
	}
	for _, d := range big.TryPoll(10) {
		fmt.Println(d.Payload.ID, d.Payload.Amount)
	}
	// Output:
	// 1 5000
	// 3 1200
}

// A test moves a mock clock only once the poller it means to wake is
// asleep on it.
func ExampleSubscription_AwaitParked() {
	ctx := context.Background()
	mock := clock.NewMock()
	b, _ := broker.New[string](broker.WithClock(mock))
	defer b.Close()
	b.CreateTopic("t")
	sub, _ := b.Subscribe("t", "s")
	b.Publish(ctx, "t", "in an hour", broker.WithDelay(time.Hour))

	got := make(chan string)
	go func() {
		ds, _ := sub.Poll(ctx, 1) // blocks: nothing visible yet
		got <- ds[0].Payload
	}()
	sub.AwaitParked(ctx, 1)
	mock.Add(time.Hour)
	fmt.Println(<-got)
	// Output:
	// in an hour
}

func TestMessageIDsAreUniqueVersion8(t *testing.T) {
	b, _ := broker.New[int]()
	defer b.Close()
	b.CreateTopic("t")
	seen := make(map[string]bool)
	for i := range 1000 {
		m, err := b.Publish(context.Background(), "t", i)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID.Version() != 8 || m.ID.Variant().String() != "RFC4122" || seen[m.ID.String()] {
			t.Fatalf("bad or repeated id %v", m.ID)
		}
		seen[m.ID.String()] = true
	}
}

// A durable broker kept in a directory: a batch job that stops (or
// crashes) halfway opens the directory again and carries on. The message
// that was leased when it stopped comes back with its attempt counted.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "leasebus-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	// First run: publish three jobs, finish one, stop while holding another.
	b, err := broker.Open(dir, queue.JSONCodec[string]())
	if err != nil {
		fmt.Println(err)
		return
	}
	b.CreateTopic("jobs")
	sub, _ := b.Subscribe("jobs", "workers", broker.WithMaxAttempts(3))
	for _, job := range []string{"a.csv", "b.csv", "c.csv"} {
		b.Publish(ctx, "jobs", job)
	}
	ds, _ := sub.Poll(ctx, 2)
	sub.Ack(ds[0].LeaseID) // a.csv done; b.csv still leased
	b.Close()

	// Second run: the same declarations bring the subscription back.
	b, _ = broker.Open(dir, queue.JSONCodec[string]())
	defer b.Close()
	fmt.Printf("%+v\n", b.Recovery())
	b.CreateTopic("jobs")
	sub, _ = b.Subscribe("jobs", "workers", broker.WithMaxAttempts(3))
	for _, d := range sub.TryPoll(10) {
		fmt.Println(d.Payload, "attempt", d.Attempt)
		sub.Ack(d.LeaseID)
	}
	// Output:
	// {Records:8 TruncatedBytes:0 Topics:1 Subscriptions:1 Messages:2 DeadLetters:0}
	// b.csv attempt 2
	// c.csv attempt 1
}

// A broker's defaults apply to every subscription; a subscription's own
// options override them.
func ExampleWithSubscriptionDefaults() {
	b, _ := broker.New[string](broker.WithSubscriptionDefaults(
		broker.WithMaxAttempts(3),
		broker.WithVisibilityTimeout(time.Minute),
	))
	defer b.Close()
	b.CreateTopic("orders")
	billing, _ := b.Subscribe("orders", "billing")
	audit, _ := b.Subscribe("orders", "audit", broker.WithMaxAttempts(10))

	fmt.Println(billing.Config().MaxAttempts, billing.Config().VisibilityTimeout)
	fmt.Println(audit.Config().MaxAttempts, audit.Config().VisibilityTimeout)
	// Output:
	// 3 1m0s
	// 10 1m0s
}
