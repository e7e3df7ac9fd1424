package natsleasebus_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// BenchmarkDrain8 measures how fast 8 workers drain b.N messages of 64
// bytes, already published, from one embedded server with file storage:
// leasebus (a hand-written Poll/Ack loop, and the poller) beside a plain
// nats.go Fetch loop on a durable of the same stream, with the same ack
// guarantee (DoubleAck: the server confirms every ack) and without it
// (Ack, fire and forget). Every variant runs in the same process, on its
// own server, so the figures are comparable within one run:
//
//	go test -run '^$' -bench Drain8 -benchtime 20000x
func BenchmarkDrain8(b *testing.B) {
	const workers, batch = 8, 10
	for _, v := range []struct {
		name  string
		drain func(b *testing.B, bus *natsleasebus.Bus, ready func(), n int64)
	}{
		{"nats.go-Fetch-DoubleAck", func(b *testing.B, bus *natsleasebus.Bus, ready func(), n int64) {
			natsDrain(b, bus, ready, n, workers, batch, true)
		}},
		{"nats.go-Fetch-Ack", func(b *testing.B, bus *natsleasebus.Bus, ready func(), n int64) {
			natsDrain(b, bus, ready, n, workers, batch, false)
		}},
		{"leasebus-Poll-Ack", func(b *testing.B, bus *natsleasebus.Bus, ready func(), n int64) {
			sub := benchSub(b, bus)
			ready()
			var acked atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() { drainN(b, sub, batch, &acked, n) })
			}
			wg.Wait()
		}},
		{"leasebus-poller", func(b *testing.B, bus *natsleasebus.Bus, ready func(), n int64) {
			poolDrain(b, bus, ready, n, poller.WithWorkers(workers), poller.WithBatch(batch))
		}},
		{"leasebus-poller-prefetch32", func(b *testing.B, bus *natsleasebus.Bus, ready func(), n int64) {
			poolDrain(b, bus, ready, n, poller.WithWorkers(workers), poller.WithBatch(batch), poller.WithMaxOutstanding(4*workers))
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			srv := startServer(b, b.TempDir(), -1)
			bus := open(b, connect(b, srv.srv.ClientURL()))
			ctx := context.Background()
			// Subscribe first (interest retention keeps nothing
			// published before), then publish, untimed.
			v.drain(b, bus, func() {
				b.StopTimer()
				payload := make([]byte, 64)
				ps := make([][]byte, 1000)
				for i := range ps {
					ps[i] = payload
				}
				for left := b.N; left > 0; left -= len(ps) {
					if _, err := natsleasebus.PublishBatch(ctx, bus, "bench", ps[:min(left, len(ps))]); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}, int64(b.N))
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// poolDrain drains n messages with a poller of the given options.
func poolDrain(b *testing.B, bus *natsleasebus.Bus, ready func(), n int64, opts ...poller.Option) {
	sub := benchSub(b, bus)
	ready()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var acked atomic.Int64
	opts = append(opts,
		poller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		poller.WithObserver(func(ev poller.Event[[]byte]) {
			if ev.Outcome == poller.OutcomeAcked && acked.Add(1) == n {
				cancel()
			}
		}))
	p, err := poller.New(sub, func(context.Context, queue.Delivery[[]byte]) error { return nil }, opts...)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
}

func benchSub(b *testing.B, bus *natsleasebus.Bus) *natsleasebus.Subscription[[]byte] {
	sub, err := natsleasebus.Subscribe[[]byte](context.Background(), bus, "bench", "w", natsleasebus.WithMaxInFlight(100000))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sub.Close() })
	return sub
}

// drainN polls and acks until n messages have been acked in all.
func drainN(b *testing.B, sub *natsleasebus.Subscription[[]byte], batch int, acked *atomic.Int64, n int64) {
	for acked.Load() < n {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		ds, err := sub.Poll(ctx, batch)
		cancel()
		if err != nil {
			continue
		}
		for _, d := range ds {
			if err := sub.Ack(d.LeaseID); err != nil {
				b.Error(err)
				return
			}
			acked.Add(1)
		}
	}
}

// natsDrain is the plain nats.go loop: a durable pull consumer of the
// same stream and filter, Fetch(batch) and an ack per message.
func natsDrain(b *testing.B, bus *natsleasebus.Bus, ready func(), n int64, workers, batch int, double bool) {
	ctx := context.Background()
	st, err := bus.JetStream().Stream(ctx, defaultStream)
	if err != nil {
		b.Fatal(err)
	}
	cons, err := st.CreateConsumer(ctx, js.ConsumerConfig{
		Durable: "plain", FilterSubject: bus.Subject("bench"), AckPolicy: js.AckExplicitPolicy, MaxAckPending: 100000,
	})
	if err != nil {
		b.Fatal(err)
	}
	ready()
	var acked atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for acked.Load() < n {
				msgs, err := cons.Fetch(batch, js.FetchMaxWait(100*time.Millisecond))
				if err != nil {
					b.Error(err)
					return
				}
				for m := range msgs.Messages() {
					if double {
						err = m.DoubleAck(ctx)
					} else {
						err = m.Ack()
					}
					if err != nil {
						b.Error(err)
						return
					}
					acked.Add(1)
				}
				if err := msgs.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, js.ErrNoMessages) {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
