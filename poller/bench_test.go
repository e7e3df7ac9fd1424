package poller_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// BenchmarkDrain measures how fast a poller with its defaults drains b.N
// messages, published before the timer starts, from an in-memory broker
// on the real clock, with a handler that returns at once: the poller's own
// cost per message (a Poll, an Ack and the hand-offs between its
// goroutines).
func BenchmarkDrain(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			br, err := broker.New[int](broker.WithSubscriptionDefaults(broker.WithMaxQueue(b.N + 1)))
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			if err := br.CreateTopic("jobs"); err != nil {
				b.Fatal(err)
			}
			sub, err := br.Subscribe("jobs", "workers")
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for i := range b.N {
				if _, err := br.Publish(ctx, "jobs", i); err != nil {
					b.Fatal(err)
				}
			}
			var acked atomic.Int64
			n := int64(b.N)
			p, err := poller.New(sub, func(context.Context, queue.Delivery[int]) error { return nil },
				poller.WithWorkers(workers),
				poller.WithObserver(func(ev poller.Event[int]) {
					if ev.Outcome == poller.OutcomeAcked && acked.Add(1) == n {
						cancel()
					}
				}))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := p.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				b.Fatal(err)
			}
			b.StopTimer()
			if got := p.Stats().Acked; got != uint64(b.N) {
				b.Fatalf("acked %d of %d", got, b.N)
			}
		})
	}
}

// drainFixture is a subscription holding n messages published before the
// timer starts, and its broker.
func drainFixture(b *testing.B, n int) (*broker.Broker[int], *broker.Subscription[int]) {
	br, err := broker.New[int](broker.WithSubscriptionDefaults(broker.WithMaxQueue(n + 1)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	if err := br.CreateTopic("jobs"); err != nil {
		b.Fatal(err)
	}
	sub, err := br.Subscribe("jobs", "workers")
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if _, err := br.Publish(context.Background(), "jobs", i); err != nil {
			b.Fatal(err)
		}
	}
	return br, sub
}

// BenchmarkPoolUntilIdle is the pool's cost per message as a batch job
// pays it: RunUntilIdle over messages published before the timer, a
// handler that returns at once, no observer. BenchmarkHandLoop is the same
// drain written by hand, the way the README does: Poll(ctx, 10), Ack each.
func BenchmarkPoolUntilIdle(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			_, sub := drainFixture(b, b.N)
			p, err := poller.New(sub, func(context.Context, queue.Delivery[int]) error { return nil }, poller.WithWorkers(workers))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := p.RunUntilIdle(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if got := p.Stats().Acked; got != uint64(b.N) {
				b.Fatalf("acked %d of %d", got, b.N)
			}
		})
	}
}

func BenchmarkHandLoop(b *testing.B) {
	_, sub := drainFixture(b, b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for acked := 0; acked < b.N; {
		ds, err := sub.Poll(ctx, 10)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range ds {
			if err := sub.Ack(d.LeaseID); err != nil {
				b.Fatal(err)
			}
		}
		acked += len(ds)
	}
}

// BenchmarkBatchUntilIdle is BenchmarkPoolUntilIdle with a batch handler
// (NewBatch) of up to 100 deliveries a call, one worker: the pool's cost
// per message when a call takes a hundred.
func BenchmarkBatchUntilIdle(b *testing.B) {
	_, sub := drainFixture(b, b.N)
	p, err := poller.NewBatch(sub, func(context.Context, []queue.Delivery[int]) ([]error, error) { return nil, nil },
		poller.WithBatchMax(100, 0))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := p.RunUntilIdle(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if got := p.Stats().Acked; got != uint64(b.N) {
		b.Fatalf("acked %d of %d", got, b.N)
	}
}
