// Command webhooks sends customers' webhooks through a partner's API at
// the pace the partner allows: a rate for the whole process, a rate for
// each customer, and a pause when the partner answers 429 Too Many
// Requests with a Retry-After.
//
//	go run ./examples/webhooks
//
// The limits live on the subscription (broker.WithRateLimit,
// broker.WithKeyRateLimit), so every worker of every pool over it shares
// them, and a message they hold back is not leased and spends no attempt.
// A 429 is poller.SlowDown: the message goes back with its attempt kept
// and the pool starts nothing until the Retry-After has passed. Its test,
// webhooks_test.go, asserts the exact schedule inside a testing/synctest
// bubble.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Webhook is one event to send to a customer's endpoint.
type Webhook struct {
	Customer string
	Event    string
}

// The pace the partner's contract allows.
const (
	partnerRate  = 10 // requests a second, all customers together
	customerRate = 2  // requests a second for any one customer
)

// TooManyRequests is the partner's 429, with its Retry-After.
type TooManyRequests struct{ RetryAfter time.Duration }

func (e *TooManyRequests) Error() string {
	return fmt.Sprintf("partner: 429 Too Many Requests, retry after %v", e.RetryAfter)
}

// Partner is the partner's API: Post sends one webhook.
type Partner interface {
	Post(ctx context.Context, h Webhook) error
}

// subscribe makes the subscription that paces the deliveries.
func subscribe(b *broker.Broker[Webhook]) (*broker.Subscription[Webhook], error) {
	if err := b.CreateTopic("webhooks"); err != nil {
		return nil, err
	}
	return b.Subscribe("webhooks", "deliver",
		broker.WithRateLimit(partnerRate, time.Second),     // the partner's limit, for every worker
		broker.WithKeyRateLimit(customerRate, time.Second), // each customer's share (the key)
		broker.WithKeyConcurrency(customerRate),            // a customer's webhooks go out in order, two at a time
	)
}

// publish queues h under its customer's key.
func publish(ctx context.Context, b *broker.Broker[Webhook], h Webhook) error {
	_, err := b.Publish(ctx, "webhooks", h, broker.WithKey(h.Customer))
	return err
}

// deliver is the handler: a 429 slows the whole pool down for its
// Retry-After, without spending the message's attempt; any other error
// is retried with the subscription's backoff.
func deliver(p Partner) poller.Handler[Webhook] {
	return func(ctx context.Context, d queue.Delivery[Webhook]) error {
		err := p.Post(ctx, d.Payload)
		var tooMany *TooManyRequests
		if errors.As(err, &tooMany) {
			return poller.SlowDown(tooMany.RetryAfter, err)
		}
		return err
	}
}

// partner is an in-process stand-in for the partner's API: it records
// every request with the time on its clock, and answers 429 once, with a
// Retry-After of 2s, to the webhook it is told to.
type partner struct {
	clock clock.Clock
	start time.Time // when the run began

	mu       sync.Mutex
	requests []string // "2.5s acme order-1"
	refuse   Webhook  // the webhook whose first request is answered 429
}

func (p *partner) Post(_ context.Context, h Webhook) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.clock.Since(p.start).Round(10 * time.Millisecond)
	if h == p.refuse {
		p.requests = append(p.requests, fmt.Sprintf("%v %s %s 429", at, h.Customer, h.Event))
		p.refuse = Webhook{}
		return &TooManyRequests{RetryAfter: 2 * time.Second}
	}
	p.requests = append(p.requests, fmt.Sprintf("%v %s %s", at, h.Customer, h.Event))
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, clock.New(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run sends 3 customers' webhooks, 16 in all, through a partner that
// answers globex's second with a 429, and prints every request.
func run(ctx context.Context, clk clock.Clock, out io.Writer) error {
	b, err := broker.New[Webhook](broker.WithClock(clk))
	if err != nil {
		return err
	}
	defer b.Close()
	sub, err := subscribe(b)
	if err != nil {
		return err
	}
	p := &partner{clock: clk, start: clk.Now(), refuse: Webhook{"globex", "order-2"}}
	for _, c := range []struct {
		customer string
		n        int
	}{{"acme", 8}, {"globex", 4}, {"initech", 4}} {
		for i := range c.n {
			if err := publish(ctx, b, Webhook{Customer: c.customer, Event: fmt.Sprintf("order-%d", i+1)}); err != nil {
				return err
			}
		}
	}
	pool, err := poller.New(sub, deliver(p), poller.WithWorkers(8))
	if err != nil {
		return err
	}
	if err := pool.RunUntilIdle(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	requests := slices.Clone(p.requests)
	p.mu.Unlock()
	for _, r := range requests {
		fmt.Fprintln(out, r)
	}
	fmt.Fprintln(out, pool.Stats())
	return nil
}
