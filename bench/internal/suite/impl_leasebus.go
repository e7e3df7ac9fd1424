package suite

import (
	"context"
	"fmt"
	"os"
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

// LeaseBusPoll is leasebus as the README and every example use it:
// Poll(ctx, n), which returns a fresh slice, then Ack per delivery, where
// LeaseBus reuses a buffer with PollInto.
var LeaseBusPoll = Impl{
	Name:   "leasebus-poll",
	Module: "github.com/leasebus/leasebus (this tree), Poll + Ack",
	Notes:  "as leasebus, with Poll(ctx, n) (a fresh slice each call) in place of PollInto",
	New: func(s Setup) (System, error) {
		sys, err := newLeaseBus(s)
		if err != nil {
			return nil, err
		}
		return pollLeaseBus{sys.(*leaseBus)}, nil
	},
	skip: func(w Workload, short bool) string {
		if durableSkip(w, short) != "" {
			return "the user's path: measured on W1–W4 only"
		}
		return ""
	},
}

// pollLeaseBus is a leaseBus whose consumers use Poll.
type pollLeaseBus struct{ *leaseBus }

func (lb pollLeaseBus) Consumer(sub int) Consumer { return pollConsumer{lb.subs[sub]} }

type pollConsumer struct{ s *broker.Subscription[[]byte] }

func (c pollConsumer) Take(ctx context.Context, max int, fn func([]byte)) (int, error) {
	ds, err := c.s.Poll(ctx, max)
	for i, d := range ds {
		if fn != nil {
			fn(d.Payload)
		}
		if err := c.s.Ack(d.LeaseID); err != nil {
			return i, err
		}
	}
	return len(ds), err
}

func (c pollConsumer) Lease(max int) (int, error) { return len(c.s.TryPoll(max)), nil }

// LeaseBusSync is leasebus's durable mode (broker.Open) with SyncAlways:
// every call returns once its record is fdatasync'd; concurrent calls share
// an fsync. Its journal is in a temporary directory on the local disk.
var LeaseBusSync = Impl{
	Name:    "leasebus-sync",
	Module:  "github.com/leasebus/leasebus (this tree), broker.Open, SyncAlways",
	Notes:   "as leasebus, durable: fdatasync before each call returns (shared by concurrent calls)",
	New:     func(s Setup) (System, error) { return newDurableLeaseBus(s, broker.SyncAlways) },
	skip:    durableSkip,
	maxMsgs: func(w Workload, short bool) int { return durableMax(w, short, 5000) },
}

// LeaseBusNoSync is leasebus's durable mode with SyncNone: every call
// returns once its record is written to the file (the page cache), which
// survives a process crash, not a power cut (as goqite-wal's
// synchronous=NORMAL).
var LeaseBusNoSync = Impl{
	Name:    "leasebus-nosync",
	Module:  "github.com/leasebus/leasebus (this tree), broker.Open, SyncNone",
	Notes:   "as leasebus, durable against a process crash: write(2) before each call returns, no fsync",
	New:     func(s Setup) (System, error) { return newDurableLeaseBus(s, broker.SyncNone) },
	skip:    durableSkip,
	maxMsgs: func(w Workload, short bool) int { return durableMax(w, short, 50_000) },
}

func durableSkip(w Workload, short bool) string {
	switch w.Bench {
	case W1.Bench, W2.Bench, W3.Bench, W4.Bench:
		return ""
	}
	return "durable mode: measured on W1–W4 only"
}

// durableMax caps a durable run at n messages in full mode (n/5 in short),
// twice that for W2 and W3, a fifth for W4: the fsync mode costs hundreds
// of microseconds a message.
func durableMax(w Workload, short bool, n int) int {
	if short {
		n /= 5
	}
	switch w.Bench {
	case W4.Bench:
		return n / 5
	case W2.Bench, W3.Bench:
		return 2 * n
	}
	return n
}

type leaseBus struct {
	b    *broker.Broker[[]byte]
	subs []*broker.Subscription[[]byte]
	dir  string // the journal's directory, removed by Close; "" in memory
}

func newLeaseBus(s Setup) (System, error) {
	b, err := broker.New[[]byte](leaseBusOptions(s)...)
	if err != nil {
		return nil, err
	}
	return setupLeaseBus(s, b, "")
}

func newDurableLeaseBus(s Setup, mode broker.SyncMode) (System, error) {
	dir, err := os.MkdirTemp("", "leasebus-bench-")
	if err != nil {
		return nil, err
	}
	b, err := broker.Open(dir, queue.BytesCodec(), append(leaseBusOptions(s), broker.WithSync(mode))...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return setupLeaseBus(s, b, dir)
}

func leaseBusOptions(s Setup) []broker.Option {
	opts := []broker.Option{broker.WithSubscriptionDefaults(broker.WithMaxQueue(1<<21), broker.WithVisibilityTimeout(visibility(s)))}
	if s.Clock != nil {
		opts = append(opts, broker.WithClock(s.Clock))
	}
	return opts
}

func setupLeaseBus(s Setup, b *broker.Broker[[]byte], dir string) (System, error) {
	lb := &leaseBus{b: b, dir: dir}
	if err := b.CreateTopic("t"); err != nil {
		lb.Close()
		return nil, err
	}
	for i := range s.Subs {
		sub, err := b.Subscribe("t", fmt.Sprint("s", i))
		if err != nil {
			lb.Close()
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

func (lb *leaseBus) Close() error {
	err := lb.b.Close()
	if lb.dir != "" {
		os.RemoveAll(lb.dir)
	}
	return err
}

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
