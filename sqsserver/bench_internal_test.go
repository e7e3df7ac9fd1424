package sqsserver

import (
	"context"
	"testing"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// BenchBody is the body of the benchmarks' messages: about 100 bytes.
const BenchBody = "a message body of about one hundred bytes, like a small JSON document with an ID and a few fields...."

// BenchmarkInProcessRoundTrip is the same loop against the broker in
// process: PublishBatch of 10, Poll of 10, AckBatch.
func BenchmarkInProcessRoundTrip(b *testing.B) {
	br, err := broker.New[message](broker.WithSubscriptionDefaults(broker.WithMaxAttempts(queue.UnlimitedAttempts)))
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if err := br.CreateTopic("bench"); err != nil {
		b.Fatal(err)
	}
	sub, err := br.Subscribe("bench", "sqs")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	payloads := make([]message, 10)
	for i := range payloads {
		payloads[i] = message{Body: BenchBody}
	}
	ids := make([]lease.ID, 0, 10)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := br.PublishBatch(ctx, "bench", payloads); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < 10; {
			ds, err := sub.Poll(ctx, 10)
			if err != nil {
				b.Fatal(err)
			}
			ids = ids[:0]
			for _, d := range ds {
				ids = append(ids, d.LeaseID)
			}
			if err := sub.AckBatch(ids); err != nil {
				b.Fatal(err)
			}
			got += len(ds)
		}
	}
	b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "msg/s")
}
