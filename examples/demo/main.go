// Command demo is the tour of leasebus's semantics, pull-shaped: fan-out to
// independent subscriptions, priority order, filtering, a failing message
// retried with backoff and then dead-lettered, and an idempotent consumer
// that sees a duplicate once.
//
//	go run ./examples/demo
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// event is the payload of every message in the demo.
type event struct {
	Kind string
	N    int
}

func run(w io.Writer) error {
	ctx := context.Background()
	// A mock clock makes the retry part instant and the output exact.
	mock := clock.NewMock()
	b, err := broker.New[event](broker.WithClock(mock), broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(30*time.Second)))
	if err != nil {
		return err
	}
	defer b.Close()
	for _, part := range []func(context.Context, io.Writer, *broker.Broker[event], *clock.Mock) error{fanOut, retryThenDeadLetter, idempotent} {
		if err := part(ctx, w, b, mock); err != nil {
			return err
		}
	}
	return nil
}

// fanOut shows that each subscription has its own queue, ordered by
// priority, and that a filter picks what a subscription takes.
func fanOut(ctx context.Context, w io.Writer, b *broker.Broker[event], _ *clock.Mock) error {
	if err := b.CreateTopic("events"); err != nil {
		return err
	}
	fmt.Fprintln(w, "=== Fan-out: each subscription has its own queue ===")
	audit, _ := b.Subscribe("events", "audit")
	mailer, _ := b.Subscribe("events", "mailer")
	signups, err := b.Subscribe("events", "signups-only",
		broker.WithFilter(func(m queue.Message[event]) bool { return m.Payload.Kind == "signup" }))
	if err != nil {
		return err
	}
	for _, e := range []struct {
		kind string
		prio queue.Priority
	}{{"login", queue.PriorityLow}, {"signup", queue.PriorityNormal}, {"payment", queue.PriorityCritical}, {"signup", queue.PriorityHigh}} {
		if _, err := b.Publish(ctx, "events", event{Kind: e.kind}, broker.WithPriority(e.prio)); err != nil {
			return err
		}
	}
	for _, s := range []*broker.Subscription[event]{audit, mailer, signups} {
		ds, _ := s.Poll(ctx, 10)
		fmt.Fprintf(w, "%-13s", s.Name()+":")
		for _, d := range ds {
			fmt.Fprintf(w, " %s(%v)", d.Payload.Kind, d.Priority)
			if s != mailer {
				s.Ack(d.LeaseID)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "mailer never acked; audit is unaffected:", audit.Stats().Acked, "acked,", mailer.Stats().InFlight, "still leased by mailer")
	return nil
}

// retryThenDeadLetter fails a message until its attempts run out, the
// mock clock waiting out each backoff.
func retryThenDeadLetter(ctx context.Context, w io.Writer, b *broker.Broker[event], mock *clock.Mock) error {
	fmt.Fprintln(w, "\n=== Retry with backoff, then dead letter ===")
	if err := b.CreateTopic("payments"); err != nil {
		return err
	}
	pay, _ := b.Subscribe("payments", "charge", broker.WithMaxAttempts(3),
		broker.WithRetry(queue.RetryPolicy{Initial: time.Second, Multiplier: 2}))
	b.Publish(ctx, "payments", event{Kind: "charge", N: 42})
	start := mock.Now()
	for {
		ds := pay.TryPoll(1)
		if len(ds) == 0 {
			if pay.Stats().Delayed == 0 {
				break
			}
			mock.Add(time.Second) // wait out the backoff, one mock second at a time
			continue
		}
		d := ds[0]
		fmt.Fprintf(w, "t=%-3v attempt %d: card declined\n", mock.Now().Sub(start), d.Attempt)
		pay.Fail(d.LeaseID, errors.New("card declined"))
	}
	for _, dl := range b.DeadLetters() {
		fmt.Fprintf(w, "dead letter: %s #%d on %q: %v after %d attempts, last error %q\n",
			dl.Message.Payload.Kind, dl.Message.Payload.N, dl.Subscription, dl.Reason, dl.Attempts, dl.LastError)
	}
	return nil
}

// idempotent loses an ack, so the message comes back, and a Deduper keeps
// the work from running twice.
func idempotent(ctx context.Context, w io.Writer, b *broker.Broker[event], mock *clock.Mock) error {
	fmt.Fprintln(w, "\n=== Idempotent consumer: a duplicate is processed once ===")
	if err := b.CreateTopic("orders"); err != nil {
		return err
	}
	orders, _ := b.Subscribe("orders", "fulfil")
	seen, _ := poller.NewDeduper(1000)
	m, _ := b.Publish(ctx, "orders", event{Kind: "order", N: 7})
	// The first delivery is processed, but its ack is lost: the lease expires.
	d := orders.TryPoll(1)[0]
	seen.Do(d.ID, func() error { fmt.Fprintln(w, "shipped order", d.Payload.N); return nil })
	mock.Add(30 * time.Second)
	d = orders.TryPoll(1)[0]
	ran, _ := seen.Do(d.ID, func() error { fmt.Fprintln(w, "shipped order", d.Payload.N); return nil })
	fmt.Fprintf(w, "redelivery attempt %d of message %v: processed again? %v\n", d.Attempt, m.ID == d.ID, ran)
	orders.Ack(d.LeaseID)
	return nil
}
