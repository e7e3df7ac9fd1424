package natsleasebus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// Workloads, each message 64 bytes, one b.N iteration per message:
//
//	W1: publish b.N messages, then one consumer drains them with Poll(10)
//	    and acks each.
//	W2: 4 publishers and 4 consumers at once, b.N messages in all.
//
// Run: go test -run '^$' -bench . -benchtime 20000x
//
// Each runs on the in-memory broker and on an embedded JetStream server
// (memory storage and file storage), with the same Source calls.

// benchSource is what the workloads need of a backend.
type benchSource interface {
	Poll(ctx context.Context, n int) ([]queue.Delivery[[]byte], error)
	Ack(id lease.ID) error
}

type backend struct {
	publish func(ctx context.Context, payload []byte) error
	sub     benchSource
}

func memoryBackend(b *testing.B) backend {
	br, err := broker.New[[]byte](broker.WithSubscriptionDefaults(broker.WithMaxQueue(1<<22), broker.WithMaxInFlight(1<<20)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	if err := br.CreateTopic("bench"); err != nil {
		b.Fatal(err)
	}
	sub, err := br.Subscribe("bench", "w")
	if err != nil {
		b.Fatal(err)
	}
	return backend{
		publish: func(ctx context.Context, p []byte) error { _, err := br.Publish(ctx, "bench", p); return err },
		sub:     sub,
	}
}

func jetstreamBackend(b *testing.B, opts ...natsleasebus.Option) backend {
	srv := startServer(b, b.TempDir(), -1)
	nc := connect(b, srv.srv.ClientURL())
	bus := open(b, nc, opts...)
	ctx := context.Background()
	sub, err := natsleasebus.Subscribe[[]byte](ctx, bus, "bench", "w", natsleasebus.WithMaxInFlight(100000))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sub.Close() })
	return backend{
		publish: func(ctx context.Context, p []byte) error {
			_, err := natsleasebus.Publish(ctx, bus, "bench", p)
			return err
		},
		sub: sub,
	}
}

var backends = []struct {
	name string
	make func(*testing.B) backend
}{
	{"memory", memoryBackend},
	{"jetstream-mem", func(b *testing.B) backend { return jetstreamBackend(b, natsleasebus.WithMemoryStorage()) }},
	{"jetstream-file", func(b *testing.B) backend { return jetstreamBackend(b) }},
}

// drain polls and acks until total messages have been acked in all.
func drain(b *testing.B, ctx context.Context, src benchSource, acked *atomic.Int64, total int64) {
	for acked.Load() < total {
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		ds, err := src.Poll(pctx, 10)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				b.Error(err)
				return
			}
			continue
		}
		for _, d := range ds {
			if err := src.Ack(d.LeaseID); err != nil {
				b.Error(err)
				return
			}
			acked.Add(1)
		}
	}
}

func BenchmarkW1(b *testing.B) {
	payload := make([]byte, 64)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			bk := be.make(b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if err := bk.publish(ctx, payload); err != nil {
					b.Fatal(err)
				}
			}
			pub := time.Since(start)
			var acked atomic.Int64
			drain(b, ctx, bk.sub, &acked, int64(b.N))
			total := time.Since(start)
			b.ReportMetric(float64(b.N)/pub.Seconds(), "pub/s")
			b.ReportMetric(float64(b.N)/(total-pub).Seconds(), "drain/s")
		})
	}
}

func BenchmarkW2(b *testing.B) {
	payload := make([]byte, 64)
	const pubs, cons = 4, 4
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			bk := be.make(b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			var acked atomic.Int64
			for i := range pubs {
				k := b.N / pubs
				if i == 0 {
					k += b.N % pubs
				}
				wg.Go(func() {
					for range k {
						if err := bk.publish(ctx, payload); err != nil {
							b.Error(fmt.Errorf("publish: %w", err))
							return
						}
					}
				})
			}
			for range cons {
				wg.Go(func() { drain(b, ctx, bk.sub, &acked, int64(b.N)) })
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
