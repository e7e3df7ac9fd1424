package broker

import (
	"context"
	"fmt"
	"testing"

	"github.com/leasebus/leasebus/queue"
)

// BenchmarkDurablePublishConcurrent is concurrent SyncAlways publishers,
// one Publish at a time each: it reports how many messages share an
// fdatasync (group commit) besides the time per message.
func BenchmarkDurablePublishConcurrent(b *testing.B) {
	for _, publishers := range []int{1, 8} {
		b.Run(fmt.Sprint("publishers=", publishers), func(b *testing.B) {
			br, err := Open(b.TempDir(), queue.BytesCodec(), WithSubscriptionDefaults(WithMaxQueue(1<<30)))
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			br.CreateTopic("t")
			br.Subscribe("t", "s")
			payload := make([]byte, 64)
			before := br.durable().j.Syncs()
			b.SetParallelism((publishers + 1) / 2) // GOMAXPROCS is 2 here
			if publishers == 1 {
				for b.Loop() {
					if _, err := br.Publish(context.Background(), "t", payload); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := br.Publish(context.Background(), "t", payload); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			syncs := br.durable().j.Syncs() - before
			b.ReportMetric(float64(b.N)/float64(max(syncs, 1)), "msgs/fsync")
		})
	}
}
