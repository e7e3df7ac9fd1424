package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// BenchmarkFlowControl is BenchmarkPublishThenDrain's life of a message
// (publish 1,000, poll 10 at a time, ack each; one op is one message) with
// each subscription limit set so loose that it never holds a message back:
// what a limit costs a delivery it lets through. keys=K publishes over K
// ordering keys, round robin (with WithKeyConcurrency(1000), so that keys
// do not serialize the drain).
func BenchmarkFlowControl(b *testing.B) {
	const step = 1000
	loose := queue.Rate{N: 1 << 30, Per: time.Hour} // a token every 3.4ns, a billion in the bucket
	keyed := broker.WithKeyConcurrency(step)
	for _, c := range []struct {
		name string
		keys int
		opts []broker.SubscribeOption
	}{
		{"none", 0, nil},
		{"rate", 0, []broker.SubscribeOption{broker.WithRateLimit(loose.N, loose.Per)}},
		{"fair", 0, []broker.SubscribeOption{broker.WithFairKeys()}},
		{"keys=1000/none", 1000, []broker.SubscribeOption{keyed}},
		{"keys=1000/keyrate", 1000, []broker.SubscribeOption{keyed, broker.WithKeyRateLimit(loose.N, loose.Per)}},
		{"keys=1000/fair", 1000, []broker.SubscribeOption{keyed, broker.WithFairKeys()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			br, err := broker.New[[]byte](broker.WithSubscriptionDefaults(broker.WithMaxQueue(1 << 30)))
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			br.CreateTopic("t")
			s, err := br.Subscribe("t", "s", c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]broker.PublishOption, max(c.keys, 1))
			for i := range c.keys {
				keys[i] = broker.WithKey(fmt.Sprint("k", i))
			}
			ctx := context.Background()
			buf := make([]queue.Delivery[[]byte], 10)
			b.ReportAllocs()
			for n := 0; n < b.N; n += step {
				for i := range step {
					var err error
					if c.keys > 0 {
						_, err = br.Publish(ctx, "t", payload, keys[i%c.keys])
					} else {
						_, err = br.Publish(ctx, "t", payload)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				for got := 0; got < step; {
					k, _ := s.PollInto(ctx, buf)
					for _, d := range buf[:k] {
						s.Ack(d.LeaseID)
					}
					got += k
				}
			}
		})
	}
}

// BenchmarkKeyLimitMemory measures what WithKeyRateLimit and WithFairKeys
// hold for 10^5 keys: each key's one message published and delivered,
// then acked, its bucket not yet full again (B/key, against the same
// subscription without the limits); and once a period has passed and a
// new key comes, what is left (held-after-period B/key).
func BenchmarkKeyLimitMemory(b *testing.B) {
	const n = 100_000
	keys := make([]broker.PublishOption, n)
	for i := range keys {
		keys[i] = broker.WithKey(fmt.Sprintf("customer-%06d", i))
	}
	held := func(b *testing.B, limited bool) (served, later float64) {
		mock := clock.NewMock()
		br, err := broker.New[[]byte](broker.WithClock(mock))
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close()
		br.CreateTopic("t")
		opts := []broker.SubscribeOption{broker.WithMaxQueue(2 * n)}
		if limited {
			opts = append(opts, broker.WithKeyRateLimit(1, time.Second), broker.WithFairKeys())
		}
		s, err := br.Subscribe("t", "s", opts...)
		if err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ctx := context.Background()
		for _, k := range keys {
			if _, err := br.Publish(ctx, "t", payload, k); err != nil {
				b.Fatal(err)
			}
		}
		for got := 0; got < n; {
			ds := s.TryPoll(1000)
			for _, d := range ds {
				s.Ack(d.LeaseID)
			}
			got += len(ds)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		served = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		mock.Add(time.Second)
		if _, err := br.Publish(ctx, "t", payload, broker.WithKey("new")); err != nil {
			b.Fatal(err)
		}
		s.TryPoll(1)
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(s)
		return served, float64(after.HeapAlloc) - float64(before.HeapAlloc)
	}
	var served, later float64
	for b.Loop() {
		s1, l1 := held(b, true)
		s0, l0 := held(b, false)
		served, later = (s1-s0)/n, (l1-l0)/n
	}
	b.ReportMetric(served, "B/key")
	b.ReportMetric(later, "held-after-period-B/key")
}
