package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

func benchBroker(b *testing.B, subs int, opts ...broker.Option) (*broker.Broker[[]byte], []*broker.Subscription[[]byte]) {
	b.Helper()
	br, err := broker.New[[]byte](append([]broker.Option{broker.WithSubscriptionDefaults(broker.WithMaxQueue(1 << 30))}, opts...)...)
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

// BenchmarkPublishThenDrain is bench/'s W1 in steps small enough for a
// steady b.N: publish 1,000 messages, then poll them 10 at a time into a
// reused buffer and ack each. One op is one message.
func BenchmarkPublishThenDrain(b *testing.B) {
	const step = 1000
	br, ss := benchBroker(b, 1)
	s := ss[0]
	ctx := context.Background()
	buf := make([]queue.Delivery[[]byte], 10)
	b.ReportAllocs()
	for n := 0; n < b.N; n += step {
		for range step {
			br.Publish(ctx, "t", payload)
		}
		for got := 0; got < step; {
			k, _ := s.PollInto(ctx, buf)
			for _, d := range buf[:k] {
				s.Ack(d.LeaseID)
			}
			got += k
		}
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
	br, ss := benchBroker(b, 1, broker.WithClock(mock), broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(time.Second), broker.WithMaxAttempts(queue.UnlimitedAttempts)))
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
	br, ss := benchBroker(b, 1, broker.WithClock(mock), broker.WithDeadLetterLimit(1), broker.WithSubscriptionDefaults(broker.WithDefaultTTL(time.Second)))
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

// durableFixture leaves in dir a durable broker's journal holding live
// messages of 64 bytes, a tenth of them failed once, a hundredth
// dead-lettered, plus the history of as many messages published and acked;
// with dedup, every publish has a dedup ID of its own, all inside the
// window (durableOpts's).
func durableFixture(b *testing.B, dir string, live int, dedup bool) {
	b.Helper()
	br, err := broker.Open(dir, queue.BytesCodec(), append(durableOpts(), broker.WithSync(broker.SyncNone),
		broker.WithSubscriptionDefaults(broker.WithMaxQueue(1<<30), broker.WithRetry(queue.RetryPolicy{NoBackoff: true})))...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	br.CreateTopic("t")
	s, _ := br.Subscribe("t", "s")
	n := 0
	publish := func() {
		var opts []broker.PublishOption
		if n++; dedup {
			opts = append(opts, broker.WithDedupID(fmt.Sprint("order-", n)))
		}
		if _, err := br.Publish(ctx, "t", payload, opts...); err != nil {
			b.Fatal(err)
		}
	}
	for range live {
		publish()
	}
	for i, d := range s.TryPoll(live / 10) {
		if i%10 == 0 {
			s.Reject(d.LeaseID, nil)
		} else {
			s.Fail(d.LeaseID, nil)
		}
	}
	buf := make([]queue.Delivery[[]byte], 100)
	for range live / 100 { // history: published and acked
		for range 100 {
			publish()
		}
		n, _ := s.TryPollInto(buf)
		for _, d := range buf[:n] {
			s.Ack(d.LeaseID) // acks the oldest: the history is among the first ones
		}
	}
	if err := br.Close(); err != nil {
		b.Fatal(err)
	}
}

// durableOpts are the options of durableFixture's broker and of those that
// open its directory again: nothing compacts, dead-lettered or dedup'd
// before the benchmark is dropped.
func durableOpts() []broker.Option {
	return []broker.Option{broker.WithCompactMin(-1), broker.WithDeadLetterLimit(1 << 30),
		broker.WithDedupWindow(time.Hour), broker.WithDedupLimit(1 << 30)}
}

// BenchmarkDurableOpen measures recovery: Open replays a journal of 100k
// live messages (and 100k more published and acked) and rebuilds the
// broker; "dedup": each publish had a dedup ID, which Open restores too.
// (Each Open here reuses the heap of the one before; internal/cmd/reopenbench
// measures one in a fresh process, as a restart is.)
func BenchmarkDurableOpen(b *testing.B) {
	for _, dedup := range []bool{false, true} {
		b.Run(fmt.Sprint("dedup=", dedup), func(b *testing.B) {
			dir := b.TempDir()
			durableFixture(b, dir, 100_000, dedup)
			var records int
			for b.Loop() {
				br, err := broker.Open(dir, queue.BytesCodec(), durableOpts()...)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if got := br.Recovery().Messages + br.Recovery().DeadLetters; got != 100_000 {
					b.Fatalf("recovered %d messages and dead letters, want 100000", got)
				}
				records = br.Recovery().Records
				br.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkDurableCompact measures a compaction of 100k live messages:
// every call on the broker waits while it runs.
func BenchmarkDurableCompact(b *testing.B) {
	dir := b.TempDir()
	durableFixture(b, dir, 100_000, false)
	br, err := broker.Open(dir, queue.BytesCodec(), durableOpts()...)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	for b.Loop() {
		if err := br.Compact(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDurablePublish is the cost per message of publishing to a
// durable broker with SyncAlways, one Publish at a time and in batches of
// 100 (one fsync per batch).
func BenchmarkDurablePublish(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprint("batch=", batch), func(b *testing.B) {
			br, err := broker.Open(b.TempDir(), queue.BytesCodec(), broker.WithSubscriptionDefaults(broker.WithMaxQueue(1<<30)))
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			br.CreateTopic("t")
			br.Subscribe("t", "s")
			ctx := context.Background()
			ps := make([][]byte, batch)
			for i := range ps {
				ps[i] = payload
			}
			b.ReportAllocs()
			for b.Loop() {
				if batch == 1 {
					_, err = br.Publish(ctx, "t", payload)
				} else {
					_, err = br.PublishBatch(ctx, "t", ps)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/msg")
		})
	}
}

// BenchmarkDurablePublishGroup is BenchmarkDurablePublish for the publishes
// whose records are one group: to two subscriptions, and with a dedup ID
// per message, one at a time and in batches of 100.
func BenchmarkDurablePublishGroup(b *testing.B) {
	for _, c := range []struct {
		name        string
		subs, batch int
		dedup       bool
	}{{"subs=2", 2, 1, false}, {"dedup", 1, 1, true}, {"dedup/batch=100", 1, 100, true}} {
		b.Run(c.name, func(b *testing.B) {
			br, err := broker.Open(b.TempDir(), queue.BytesCodec(), broker.WithDedupLimit(1<<30), broker.WithSync(broker.SyncNone), broker.WithSubscriptionDefaults(broker.WithMaxQueue(1<<30)))
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			br.CreateTopic("t")
			for i := range c.subs {
				br.Subscribe("t", fmt.Sprint("s", i))
			}
			ctx := context.Background()
			ps := make([][]byte, c.batch)
			ids := make([]string, c.batch)
			for i := range ps {
				ps[i] = payload
			}
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				var opts []broker.PublishOption
				if c.dedup {
					for i := range ids {
						n++
						ids[i] = strconv.Itoa(n)
					}
					if c.batch == 1 {
						opts = append(opts, broker.WithDedupID(ids[0]))
					} else {
						opts = append(opts, broker.WithDedupIDs(ids))
					}
				}
				if c.batch == 1 {
					_, err = br.Publish(ctx, "t", payload, opts...)
				} else {
					_, err = br.PublishBatch(ctx, "t", ps, opts...)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.batch), "ns/msg")
		})
	}
}

// BenchmarkDurableEnqueue100k enqueues a batch job's input of 100,000 items
// on a SyncAlways broker in batches of 1,000: plain, and idempotent with a
// dedup ID per item (WithDedupIDs). The bar: idempotent within 2x
// of plain.
func BenchmarkDurableEnqueue100k(b *testing.B) {
	const items, batch = 100_000, 1_000
	ps := make([][]byte, batch)
	for i := range ps {
		ps[i] = payload
	}
	ids := make([]string, items)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%08d", i)
	}
	for _, dedup := range []bool{false, true} {
		b.Run(fmt.Sprint("dedup=", dedup), func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				br, err := broker.Open(b.TempDir(), queue.BytesCodec(), broker.WithDedupLimit(items), broker.WithDedupWindow(24*time.Hour), broker.WithSubscriptionDefaults(broker.WithMaxQueue(1<<30)))
				if err != nil {
					b.Fatal(err)
				}
				br.CreateTopic("t")
				br.Subscribe("t", "s")
				b.StartTimer()
				for i := 0; i < items; i += batch {
					var opts []broker.PublishOption
					if dedup {
						opts = append(opts, broker.WithDedupIDs(ids[i:i+batch]))
					}
					if _, err := br.PublishBatch(ctx, "t", ps, opts...); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				br.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*items), "ns/item")
		})
	}
}

// BenchmarkDedupMemory reports the heap held per remembered dedup ID beyond
// the ID's own bytes (13-byte IDs, made before the first reading; a 64-byte
// payload) once its message is settled: each message is polled and acked as
// it is published, and B/id is the heap the run with IDs holds at its end
// less what the same run without IDs holds, per ID. "burst": 100,000
// publishes, the collector left to its own pace; "steady": a collection
// every 1,000 publishes besides, as the pace of a long-running service
// would have it. An ID holds its message's envelope weakly until the
// table's sweep finds it collected.
func BenchmarkDedupMemory(b *testing.B) {
	const n = 100_000
	ids := dedupIDs(n)
	for _, gcEvery := range []int{0, 1000} {
		name := "burst"
		if gcEvery > 0 {
			name = "steady"
		}
		b.Run(name, func(b *testing.B) {
			var perID float64
			for b.Loop() {
				perID = (dedupHeld(b, ids, true, gcEvery) - dedupHeld(b, ids, false, gcEvery)) / n
			}
			b.ReportMetric(perID, "B/id")
		})
	}
}

// BenchmarkDedupMemoryAtScale is BenchmarkDedupMemory's burst at 10^3 to
// 10^7 IDs: what an ID costs at 10^7 against what it costs at 10^3.
// 10^7 takes a minute and about 3 GB; -short stops at 10^6.
func BenchmarkDedupMemoryAtScale(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000, 10_000_000} {
		if testing.Short() && n > 1_000_000 {
			continue
		}
		b.Run(fmt.Sprintf("n=%.0e", float64(n)), func(b *testing.B) {
			ids := dedupIDs(n)
			var perID float64
			for b.Loop() {
				perID = (dedupHeld(b, ids, true, 0) - dedupHeld(b, ids, false, 0)) / float64(n)
			}
			b.ReportMetric(perID, "B/id")
		})
	}
}

// dedupIDs returns n distinct 13-byte (or longer) IDs.
func dedupIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%08d", i)
	}
	return ids
}

// dedupHeld publishes a message per ID (with the ID as its dedup ID when
// withIDs), polling and acking each as it goes, with a collection every
// gcEvery publishes (0: none), and returns the heap the broker holds at
// the end.
func dedupHeld(b *testing.B, ids []string, withIDs bool, gcEvery int) float64 {
	br, err := broker.New[[]byte](broker.WithDedupLimit(len(ids)), broker.WithSubscriptionDefaults(broker.WithMaxQueue(1<<30)))
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	br.CreateTopic("t")
	sub, err := br.Subscribe("t", "s")
	if err != nil {
		b.Fatal(err)
	}
	ds := make([]queue.Delivery[[]byte], 1)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i, id := range ids {
		var opts []broker.PublishOption
		if withIDs {
			opts = append(opts, broker.WithDedupID(id))
		}
		if _, err := br.Publish(context.Background(), "t", payload, opts...); err != nil {
			b.Fatal(err)
		}
		if n, err := sub.TryPollInto(ds); err != nil || n != 1 || sub.Ack(ds[0].LeaseID) != nil {
			b.Fatal("poll and ack", n, err)
		}
		ds[0] = queue.Delivery[[]byte]{}
		if gcEvery > 0 && i%gcEvery == gcEvery-1 {
			runtime.GC()
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(br)
	return float64(after.HeapAlloc) - float64(before.HeapAlloc)
}

// BenchmarkAckWithParkedPollers acks leases while four pollers wait in
// Poll with nothing visible: an ack makes nothing visible, so it should
// not wake them (with no MaxInFlight to make room under).
func BenchmarkAckWithParkedPollers(b *testing.B) {
	br, ss := benchBroker(b, 1)
	s := ss[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range b.N {
		br.Publish(ctx, "t", payload)
	}
	ds := s.TryPoll(b.N)
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				s.Poll(ctx, 1)
			}
		}()
	}
	if err := s.AwaitParked(ctx, 4); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for _, d := range ds {
		if err := s.Ack(d.LeaseID); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cancel()
	for range 4 {
		<-done
	}
}

// BenchmarkUserPath is W1 the way the README and every example write it:
// publish 1,000 messages, then Poll(ctx, 10), which returns a fresh
// slice, and Ack each delivery. One op is one message.
func BenchmarkUserPath(b *testing.B) {
	const step = 1000
	br, ss := benchBroker(b, 1)
	s := ss[0]
	ctx := context.Background()
	b.ReportAllocs()
	for n := 0; n < b.N; n += step {
		for range step {
			br.Publish(ctx, "t", payload)
		}
		for got := 0; got < step; {
			ds, _ := s.Poll(ctx, 10)
			for _, d := range ds {
				s.Ack(d.LeaseID)
			}
			got += len(ds)
		}
	}
}
