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

// BenchmarkDurableDrain drains a durable broker (its journal on disk, in
// each sync mode) with the per-message pool (eight workers) and with a
// batch pool (batches of 100, one worker), whose successes go to the
// journal in one AckBatch a call: the cost per message of each.
func BenchmarkDurableDrain(b *testing.B) {
	for _, mode := range []broker.SyncMode{broker.SyncNone, broker.SyncAlways} {
		for _, batch := range []bool{false, true} {
			name := fmt.Sprintf("sync=%v/pool", mode)
			if batch {
				name = fmt.Sprintf("sync=%v/batch", mode)
			}
			b.Run(name, func(b *testing.B) {
				br, err := broker.Open(b.TempDir(), queue.StringCodec(), broker.WithSync(mode),
					broker.WithSubscriptionDefaults(broker.WithMaxQueue(b.N+1)))
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
				msgs := make([]string, 100)
				for i := range msgs {
					msgs[i] = fmt.Sprint("job ", i)
				}
				for left := b.N; left > 0; left -= len(msgs) {
					if _, err := br.PublishBatch(context.Background(), "jobs", msgs[:min(left, len(msgs))]); err != nil {
						b.Fatal(err)
					}
				}
				var p *poller.Poller[string]
				if batch {
					p, err = poller.NewBatch(sub, func(context.Context, []queue.Delivery[string]) ([]error, error) { return nil, nil },
						poller.WithBatchMax(100, 0))
				} else {
					p, err = poller.New(sub, func(context.Context, queue.Delivery[string]) error { return nil }, poller.WithWorkers(8))
				}
				if err != nil {
					b.Fatal(err)
				}
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
}
