package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// BenchmarkExpiryFirstPoll measures a mass expiry through the public
// API: n leases of one subscription expire at once (a mock clock moves past
// their deadline) and the first Poll settles them all. It reports that
// Poll per expired message (first-poll-ns/msg) and, from a goroutine that
// publishes to the same subscription every 100 µs meanwhile (from 1 ms
// after the Poll began), the longest Publish (max-publish-ms). internal/core's BenchmarkExpiry measures the
// same thing closer up.
func BenchmarkExpiryFirstPoll(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			const vis = time.Minute
			mock := clock.NewMock()
			br, err := broker.New[int](broker.WithClock(mock), broker.WithSubscriptionDefaults(broker.WithMaxQueue(2*n), broker.WithVisibilityTimeout(vis), broker.WithMaxAttempts(queue.UnlimitedAttempts)))
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			if err := br.CreateTopic("t"); err != nil {
				b.Fatal(err)
			}
			sub, err := br.Subscribe("t", "s")
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := range n {
				if _, err := br.Publish(ctx, "t", i); err != nil {
					b.Fatal(err)
				}
			}
			buf := make([]queue.Delivery[int], 1024)
			leaseAll := func() {
				for {
					k, err := sub.TryPollInto(buf)
					if err != nil {
						b.Fatal(err)
					}
					for _, d := range buf[:k] {
						if d.Payload < 0 { // the publisher's
							if err := sub.Ack(d.LeaseID); err != nil {
								b.Fatal(err)
							}
						}
					}
					if k == 0 {
						return
					}
				}
			}
			leaseAll()

			var first, worst time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				mock.Add(vis)
				runtime.GC()
				b.StartTimer()

				t := time.Now()
				done := make(chan struct{})
				var wg sync.WaitGroup
				var pub time.Duration
				wg.Go(func() {
					time.Sleep(time.Millisecond) // the Poll takes the lock first
					for {
						time.Sleep(100 * time.Microsecond)
						select {
						case <-done:
							return
						default:
						}
						t := time.Now()
						if _, err := br.Publish(ctx, "t", -1); err != nil {
							panic(err)
						}
						pub = max(pub, time.Since(t))
					}
				})
				ds := sub.TryPoll(1)
				first += time.Since(t)

				b.StopTimer()
				close(done)
				wg.Wait()
				worst = max(worst, pub)
				if len(ds) != 1 || ds[0].Attempt < 2 {
					b.Fatalf("first poll after expiry = %+v", ds)
				}
				leaseAll()
				b.StartTimer()
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(first.Nanoseconds())/float64(b.N)/float64(n), "first-poll-ns/msg")
			b.ReportMetric(float64(worst.Microseconds())/1e3, "max-publish-ms")
		})
	}
}
