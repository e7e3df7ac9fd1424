package suite

import (
	"context"
	"time"

	"github.com/leasebus/leasebus/bench/internal/leasefloor"
)

// Chan is the first floor: a buffered Go channel per subscription, sized
// to hold the whole backlog. No leases, so no acks and no redelivery.
var Chan = Impl{
	Name:   "chan",
	Module: "floor: a buffered chan []byte per subscription",
	Notes:  "receive 1 blocking + up to max-1 without blocking; nothing to ack",
	New:    newChan,
	skip: func(w Workload, _ bool) string {
		if w.Bench == Exp.Bench {
			return "no leases to expire"
		}
		return ""
	},
}

type chanSystem struct{ subs []chan []byte }

func newChan(s Setup) (System, error) {
	c := &chanSystem{subs: make([]chan []byte, s.Subs)}
	for i := range c.subs {
		c.subs[i] = make(chan []byte, max(s.Capacity, 1))
	}
	return c, nil
}

func (c *chanSystem) Publish(ctx context.Context, p []byte) error {
	for _, ch := range c.subs {
		select {
		case ch <- p:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (c *chanSystem) Consumer(sub int) Consumer { return chanConsumer(c.subs[sub]) }

func (c *chanSystem) Close() error { return nil }

type chanConsumer chan []byte

func (c chanConsumer) Take(ctx context.Context, max int, fn func([]byte)) (int, error) {
	var p []byte
	select {
	case p = <-c:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	n := 1
	for {
		if fn != nil {
			fn(p)
		}
		if n == max {
			return n, nil
		}
		select {
		case p = <-c:
			n++
		default:
			return n, nil
		}
	}
}

// LeaseFloor is the second floor, the one every ratio is taken to: the
// simplest real lease queue (package leasefloor), one per subscription.
var LeaseFloor = Impl{
	Name:   FloorName,
	Module: "floor: mutex + slice FIFO + container/heap of leases (bench/leasefloor)",
	Notes:  "Poll into a reused buffer, then Ack per lease",
	New:    newLeaseFloor,
}

type floorSystem struct{ subs []*leasefloor.Queue[[]byte] }

func newLeaseFloor(s Setup) (System, error) {
	now := time.Now
	if s.Clock != nil {
		now = s.Clock.Now
	}
	f := &floorSystem{subs: make([]*leasefloor.Queue[[]byte], s.Subs)}
	for i := range f.subs {
		f.subs[i] = leasefloor.New[[]byte](now, visibility(s))
	}
	return f, nil
}

func (f *floorSystem) Publish(_ context.Context, p []byte) error {
	for _, q := range f.subs {
		q.Publish(p)
	}
	return nil
}

func (f *floorSystem) Consumer(sub int) Consumer { return &floorConsumer{q: f.subs[sub]} }

func (f *floorSystem) Close() error { return nil }

type floorConsumer struct {
	q   *leasefloor.Queue[[]byte]
	buf []leasefloor.Delivery[[]byte]
}

func (c *floorConsumer) Take(ctx context.Context, max int, fn func([]byte)) (int, error) {
	if cap(c.buf) < max {
		c.buf = make([]leasefloor.Delivery[[]byte], max)
	}
	n, err := c.q.Poll(ctx, c.buf[:max])
	for i := range n {
		if fn != nil {
			fn(c.buf[i].Payload)
		}
		if err := c.q.Ack(c.buf[i].ID); err != nil {
			return i, err
		}
	}
	return n, err
}

func (c *floorConsumer) Lease(max int) (int, error) {
	if cap(c.buf) < max {
		c.buf = make([]leasefloor.Delivery[[]byte], max)
	}
	return c.q.TryPoll(c.buf[:max]), nil
}
