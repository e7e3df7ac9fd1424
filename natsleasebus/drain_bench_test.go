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
//
// The time is the drain's, from the first Poll to the last message's
// confirmed ack: what each variant does after it (a loop's last Fetch or
// Poll waiting out its 100ms for messages that will not come, a pool's
// drain waiting for its Polls to end, up to a poll slice) is shutdown,
// not throughput, and is left out of every variant alike. Beside the
// rate it reports the CPU the process spent a message (cpu-µs/msg,
// server and client alike, where the system reports it), which moves less
// than the rate when the machine's neighbours come and go.
func BenchmarkDrain8(b *testing.B) {
	const workers, batch = 8, 10
	for _, v := range []struct {
		name string
		// setup readies a variant on bus; the drain it returns runs
		// timed, in a goroutine of its own (so it reports with b.Error).
		setup func(b *testing.B, bus *natsleasebus.Bus) (drain func(c *counter))
	}{
		{"nats.go-Fetch-DoubleAck", func(b *testing.B, bus *natsleasebus.Bus) func(*counter) {
			return natsDrain(b, bus, workers, batch, true)
		}},
		{"nats.go-Fetch-Ack", func(b *testing.B, bus *natsleasebus.Bus) func(*counter) {
			return natsDrain(b, bus, workers, batch, false)
		}},
		{"leasebus-Poll-Ack", func(b *testing.B, bus *natsleasebus.Bus) func(*counter) {
			sub := benchSub(b, bus)
			return func(c *counter) {
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() { drainN(b, sub, batch, c) })
				}
				wg.Wait()
			}
		}},
		{"leasebus-poller", func(b *testing.B, bus *natsleasebus.Bus) func(*counter) {
			return poolDrain(b, bus, false, poller.WithWorkers(workers), poller.WithBatch(batch))
		}},
		{"leasebus-poller-prefetch32", func(b *testing.B, bus *natsleasebus.Bus) func(*counter) {
			return poolDrain(b, bus, false, poller.WithWorkers(workers), poller.WithBatch(batch), poller.WithMaxOutstanding(4*workers))
		}},
		{"leasebus-batch100", func(b *testing.B, bus *natsleasebus.Bus) func(*counter) {
			return poolDrain(b, bus, true, poller.WithWorkers(2), poller.WithBatchMax(100, 0))
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			srv := startServer(b, b.TempDir(), -1)
			bus := open(b, connect(b, srv.srv.ClientURL()))
			// Subscribe first (interest retention keeps nothing
			// published before), then publish, untimed.
			drain := v.setup(b, bus)
			payload := make([]byte, 64)
			ps := make([][]byte, 1000)
			for i := range ps {
				ps[i] = payload
			}
			for left := b.N; left > 0; left -= len(ps) {
				if _, err := natsleasebus.PublishBatch(context.Background(), bus, "bench", ps[:min(left, len(ps))]); err != nil {
					b.Fatal(err)
				}
			}
			c := &counter{n: int64(b.N), all: make(chan struct{})}
			drained := make(chan struct{})
			b.ResetTimer()
			cpu0 := cpuTime()
			go func() {
				defer close(drained)
				drain(c)
			}()
			select {
			case <-c.all:
				b.StopTimer()
				if cpu := cpuTime(); cpu > 0 {
					b.ReportMetric(float64((cpu-cpu0).Microseconds())/float64(b.N), "cpu-µs/msg")
				}
			case <-drained: // it failed, and said so
			}
			<-drained
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// counter counts the acks of a drain of n messages and closes all at the
// n-th.
type counter struct {
	n     int64
	acked atomic.Int64
	all   chan struct{}
}

// ack counts one ack.
func (c *counter) ack() {
	if c.acked.Add(1) == c.n {
		close(c.all)
	}
}

// done reports whether n have been acked.
func (c *counter) done() bool { return c.acked.Load() >= c.n }

// poolDrain readies a poller of the given options (a batch pool,
// NewBatch, when batchPool); its drain runs it until every message is
// acked.
func poolDrain(b *testing.B, bus *natsleasebus.Bus, batchPool bool, opts ...poller.Option) func(*counter) {
	sub := benchSub(b, bus)
	var c *counter
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	opts = append(opts,
		poller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		poller.WithObserver(func(ev poller.Event[[]byte]) {
			if ev.Outcome == poller.OutcomeAcked {
				c.ack()
				if c.done() {
					cancel()
				}
			}
		}))
	var p *poller.Poller[[]byte]
	var err error
	if batchPool {
		p, err = poller.NewBatch(sub, func(context.Context, []queue.Delivery[[]byte]) ([]error, error) { return nil, nil }, opts...)
	} else {
		p, err = poller.New(sub, func(context.Context, queue.Delivery[[]byte]) error { return nil }, opts...)
	}
	if err != nil {
		b.Fatal(err)
	}
	return func(cnt *counter) {
		c = cnt // before Run: its observer reads it
		if err := p.Run(ctx); err != nil {
			b.Error(err)
		}
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

// drainN polls and acks until c's n messages have been acked in all.
func drainN(b *testing.B, sub *natsleasebus.Subscription[[]byte], batch int, c *counter) {
	for !c.done() {
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
			c.ack()
		}
	}
}

// natsDrain readies the plain nats.go loop: a durable pull consumer of
// the same stream and filter, Fetch(batch) and an ack per message.
func natsDrain(b *testing.B, bus *natsleasebus.Bus, workers, batch int, double bool) func(*counter) {
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
	return func(c *counter) {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for !c.done() {
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
						c.ack()
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
}
