package wmleasebus_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/wmleasebus"
)

// BenchmarkSubscriber is watermill's own subscriber benchmark
// (pubsub/tests.BenchSubscriber: one goroutine publishes b.N messages while
// the benchmark reads and acks them from one Subscribe), with the Pub/Sub
// closed at the end, beside GoChannel configured as watermill benchmarks
// it (an output buffer of b.N).
func BenchmarkSubscriber(b *testing.B) {
	for _, batch := range []int{1, 16} {
		b.Run("leasebus/batch="+strconv.Itoa(batch), func(b *testing.B) {
			bk, err := broker.New[[]byte](broker.WithSubscriptionDefaults(broker.WithMaxQueue(max(b.N, 1))))
			if err != nil {
				b.Fatal(err)
			}
			defer bk.Close()
			pub, _ := wmleasebus.NewPublisher(bk, wmleasebus.PublisherConfig{}, nil)
			sub, _ := wmleasebus.NewSubscriber(bk, wmleasebus.SubscriberConfig{ConsumerGroup: "bench", BatchSize: batch}, nil)
			defer sub.Close()
			benchSubscriber(b, pub, sub)
		})
	}
	b.Run("gochannel", func(b *testing.B) {
		g := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: int64(b.N)}, watermill.NopLogger{})
		defer g.Close()
		benchSubscriber(b, g, g)
	})
}

func benchSubscriber(b *testing.B, pub message.Publisher, sub message.Subscriber) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	published := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for range b.N {
			if err := pub.Publish("bench", message.NewMessage("1", nil)); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	for range b.N {
		(<-msgs).Ack()
	}
	b.StopTimer()
	if err := <-published; err != nil {
		b.Fatal(err)
	}
}
