package leasebuspubsub_test

import (
	"context"
	"testing"
	"time"

	"gocloud.dev/pubsub"
	"gocloud.dev/pubsub/drivertest"
	"gocloud.dev/pubsub/mempubsub"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/leasebuspubsub"
	"github.com/leasebus/leasebus/poller"
)

// BenchmarkDrivertest runs gocloud's own driver benchmark (10,000
// messages sent by 100 goroutines, then received and acked by 100; its
// "MB/s" is messages per second) on this driver, with and without lease
// extension, and on gocloud's mempubsub.
func BenchmarkDrivertest(b *testing.B) {
	for _, bc := range []struct {
		name string
		ext  time.Duration
	}{{"leasebus", 0}, {"leasebus-poller.NoExtension", poller.NoExtension}} {
		b.Run(bc.name, func(b *testing.B) {
			br, err := broker.New[[]byte](broker.WithSubscriptionDefaults(broker.WithMaxQueue(1_000_000)))
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			if err := br.CreateTopic("bench"); err != nil {
				b.Fatal(err)
			}
			if _, err := br.Subscribe("bench", "bench"); err != nil {
				b.Fatal(err)
			}
			top, err := leasebuspubsub.OpenTopic(br, "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			sub, err := leasebuspubsub.OpenSubscription(br, "bench", "bench", &leasebuspubsub.SubscriptionOptions{MaxExtension: bc.ext})
			if err != nil {
				b.Fatal(err)
			}
			defer shutdown(b, top, sub)
			drivertest.RunBenchmarks(b, top, sub)
		})
	}
	b.Run("mempubsub", func(b *testing.B) {
		top := mempubsub.NewTopic()
		sub := mempubsub.NewSubscription(top, time.Minute)
		defer shutdown(b, top, sub)
		drivertest.RunBenchmarks(b, top, sub)
	})
}

func shutdown(b *testing.B, top *pubsub.Topic, sub *pubsub.Subscription) {
	ctx := context.Background()
	if err := top.Shutdown(ctx); err != nil {
		b.Error(err)
	}
	if err := sub.Shutdown(ctx); err != nil {
		b.Error(err)
	}
}
