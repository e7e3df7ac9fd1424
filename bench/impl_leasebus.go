package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// LeaseBus is leasebus itself: one broker, one topic, Setup.Subs
// subscriptions with WithMaxQueue(1<<21) so nothing overflows. Consumers
// use PollInto with a reused buffer and Ack each lease.
var LeaseBus = Impl{
	Name:   "leasebus",
	Module: "github.com/leasebus/leasebus (this tree)",
	Notes:  "PollInto with a reused buffer, then Ack per lease; WithMaxQueue(1<<21)",
	New:    newLeaseBus,
}

type leaseBus struct {
	b    *broker.Broker[[]byte]
	subs []*broker.Subscription[[]byte]
}

func newLeaseBus(s Setup) (System, error) {
	opts := []broker.Option{broker.WithMaxQueue(1 << 21), broker.WithVisibilityTimeout(visibility(s))}
	if s.Clock != nil {
		opts = append(opts, broker.WithClock(s.Clock))
	}
	b, err := broker.New[[]byte](opts...)
	if err != nil {
		return nil, err
	}
	if err := b.CreateTopic("t"); err != nil {
		return nil, err
	}
	lb := &leaseBus{b: b}
	for i := range s.Subs {
		sub, err := b.Subscribe("t", fmt.Sprint("s", i))
		if err != nil {
			b.Close()
			return nil, err
		}
		lb.subs = append(lb.subs, sub)
	}
	return lb, nil
}

func visibility(s Setup) time.Duration {
	if s.Visibility > 0 {
		return s.Visibility
	}
	return DefaultVisibility
}

func (lb *leaseBus) Publish(ctx context.Context, p []byte) error {
	_, err := lb.b.Publish(ctx, "t", p)
	return err
}

func (lb *leaseBus) Consumer(sub int) Consumer {
	return &leaseBusConsumer{s: lb.subs[sub]}
}

func (lb *leaseBus) Close() error { return lb.b.Close() }

type leaseBusConsumer struct {
	s   *broker.Subscription[[]byte]
	buf []queue.Delivery[[]byte]
}

func (c *leaseBusConsumer) Take(ctx context.Context, max int, fn func([]byte)) (int, error) {
	if cap(c.buf) < max {
		c.buf = make([]queue.Delivery[[]byte], max)
	}
	n, err := c.s.PollInto(ctx, c.buf[:max])
	for i := range n {
		d := &c.buf[i]
		if fn != nil {
			fn(d.Payload)
		}
		if err := c.s.Ack(d.LeaseID); err != nil {
			return i, err
		}
	}
	return n, err
}

func (c *leaseBusConsumer) Lease(max int) (int, error) {
	if cap(c.buf) < max {
		c.buf = make([]queue.Delivery[[]byte], max)
	}
	return c.s.TryPollInto(c.buf[:max])
}
