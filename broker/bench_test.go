package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

func benchBroker(b *testing.B, subs int, opts ...broker.Option) (*broker.Broker[[]byte], []*broker.Subscription[[]byte]) {
	b.Helper()
	br, err := broker.New[[]byte](append([]broker.Option{broker.WithMaxQueue(1 << 30)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	br.CreateTopic("t")
	ss := make([]*broker.Subscription[[]byte], subs)
	for i := range ss {
		ss[i], _ = br.Subscribe("t", fmt.Sprint("s", i))
	}
	return br, ss
}

var payload = make([]byte, 64)

// BenchmarkPublish publishes to one subscription (nothing consumes).
func BenchmarkPublish(b *testing.B) {
	for _, subs := range []int{1, 10} {
		b.Run(fmt.Sprint("subs=", subs), func(b *testing.B) {
			br, _ := benchBroker(b, subs)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				br.Publish(ctx, "t", payload)
			}
		})
	}
}

// BenchmarkPublishPollAck is one message's whole life: publish, poll into
// a reused buffer, ack.
func BenchmarkPublishPollAck(b *testing.B) {
	br, ss := benchBroker(b, 1)
	s := ss[0]
	ctx := context.Background()
	buf := make([]queue.Delivery[[]byte], 1)
	b.ReportAllocs()
	for b.Loop() {
		br.Publish(ctx, "t", payload)
		s.PollInto(ctx, buf)
		s.Ack(buf[0].LeaseID)
	}
}

// BenchmarkPollAck measures Poll and Ack alone on a deep queue, in batches
// of 10 into a reused buffer.
func BenchmarkPollAck(b *testing.B) {
	br, ss := benchBroker(b, 1)
	s := ss[0]
	ctx := context.Background()
	buf := make([]queue.Delivery[[]byte], 10)
	ids := make([]lease.ID, 10)
	b.ReportAllocs()
	b.StopTimer()
	for range b.N + 10 {
		br.Publish(ctx, "t", payload)
	}
	b.StartTimer()
	for i := 0; i < b.N; i += 10 {
		n, _ := s.PollInto(ctx, buf)
		for j, d := range buf[:n] {
			ids[j] = d.LeaseID
		}
		s.AckBatch(ids[:n])
	}
}

// BenchmarkExtend extends one live lease.
func BenchmarkExtend(b *testing.B) {
	br, ss := benchBroker(b, 1)
	s := ss[0]
	br.Publish(context.Background(), "t", payload)
	d := s.TryPoll(1)[0]
	b.ReportAllocs()
	for b.Loop() {
		s.Extend(d.LeaseID, time.Minute)
	}
}

// BenchmarkExpirySweep lets 10,000 leases expire at once on a mock clock
// and measures the sweep that returns them, per lease.
func BenchmarkExpirySweep(b *testing.B) {
	mock := clock.NewMock()
	br, ss := benchBroker(b, 1, broker.WithClock(mock), broker.WithVisibilityTimeout(time.Second),
		broker.WithMaxAttempts(queue.UnlimitedAttempts))
	s := ss[0]
	const n = 10_000
	for range n {
		br.Publish(context.Background(), "t", payload)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s.TryPoll(n)
		mock.Add(time.Second)
		b.StartTimer()
		s.Stats() // settles all n expired leases
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lease")
}

// BenchmarkTTLSweep lets 10,000 waiting messages reach their TTL at once
// on a mock clock and measures the sweep that dead-letters them, per
// message.
func BenchmarkTTLSweep(b *testing.B) {
	const n = 10_000
	mock := clock.NewMock()
	br, ss := benchBroker(b, 1, broker.WithClock(mock), broker.WithMessageTTL(time.Second),
		broker.WithDeadLetterLimit(1))
	s := ss[0]
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for range n {
			br.Publish(context.Background(), "t", payload)
		}
		mock.Add(time.Second)
		b.StartTimer()
		s.Stats() // settles: every message has expired
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
}
