package core

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/leasebus/leasebus/queue"
)

// BenchmarkExpiry lets n leases expire at once on a mock clock and times
// what follows:
//
//   - redeliver: the first TryPoll, which settles all n expiries, then
//     leasing all of them again (MaxAttempts unlimited);
//   - deadletter: the first Stats, which dead-letters all n (MaxAttempts 1)
//     and hands them to onDead.
//
// The costs are per expired message: settle-ns/msg (the settling call) and
// redeliver-ns/msg (that and leasing them all again).
//
// The stalls are the longest, over every round, of: max-hold-ms, the time
// between two chunk boundaries of the sweep (from the call's start to the
// first, between two, and from the last to the call's return or, with
// dead letters, to the first one handed over after it unlocked): an upper
// bound of how long the sweep holds the lock at a time, which also counts
// its waits for the lock between chunks (before the change, with no chunk
// boundaries, it is the whole call); and, from two goroutines that each
// wake every 100 µs while the settling call runs (from 1 ms after it
// began), max-publish-ms (one Offer) and max-lockwait-ms (taking the lock
// on its own), which also count the goroutine's own waits for a CPU.
// The mark is 5 ms. first-publish-ms times a publish that comes before
// the settling call, the first to find the expiries (one with a key,
// which takes the lock): it must not do the sweep itself.
func BenchmarkExpiry(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("redeliver/n=%d", n), func(b *testing.B) { benchExpiry(b, n, false) })
	}
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("deadletter/n=%d", n), func(b *testing.B) { benchExpiry(b, n, true) })
	}
}

func benchExpiry(b *testing.B, n int, dead bool) {
	const vis = time.Minute
	clk := clock.NewMock()
	cfg := queue.Config{Clock: clk, VisibilityTimeout: vis, MaxAttempts: queue.UnlimitedAttempts, MaxQueue: 2 * n}
	if dead {
		cfg.MaxAttempts = 1
	}
	letters := 0
	var firstLetter time.Time // when the settling call, unlocked, began to hand them over
	q, err := New(cfg, func(Letter[int]) {
		if letters == 0 {
			firstLetter = time.Now()
		}
		letters++
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	msgs := make([]queue.Message[int], n)
	for i := range msgs {
		msgs[i].Payload = i
	}
	offerAll := func() {
		for i := range msgs {
			if err := q.Offer(ctx, &msgs[i], 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	buf := make([]queue.Delivery[int], 1024)
	var probes []queue.Delivery[int] // the publisher's messages, acked between rounds
	leaseAll := func() int {
		total := 0
		for {
			k, err := q.TryPollInto(buf)
			if err != nil {
				b.Fatal(err)
			}
			if k == 0 {
				return total
			}
			for _, d := range buf[:k] {
				if d.Payload < 0 {
					probes = append(probes, d)
				}
			}
			total += k
		}
	}
	if !dead {
		offerAll()
		if got := leaseAll(); got != n {
			b.Fatalf("leased %d, want %d", got, n)
		}
	}

	var settle, maxPublish, maxWait, maxHold, firstPublish time.Duration
	var lastGap time.Time
	setGap(q, func() {
		now := time.Now()
		maxHold = max(maxHold, now.Sub(lastGap))
		lastGap = now
	})
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if dead {
			if _, err := q.Purge(); err != nil { // the probes
				b.Fatal(err)
			}
			offerAll()
			if got := leaseAll(); got != n {
				b.Fatalf("leased %d, want %d", got, n)
			}
			letters = 0
		}
		for _, d := range probes {
			if err := q.Ack(d.LeaseID); err != nil {
				b.Fatal(err)
			}
		}
		probes = probes[:0]
		clk.Add(vis) // every lease expires
		runtime.GC()
		b.StartTimer()

		// A publish that comes first, with a key so that it takes the
		// lock (the inbox's publishes never do): it must not do the sweep.
		t := time.Now()
		if err := q.Offer(ctx, &queue.Message[int]{Payload: -1, Key: "first"}, 0); err != nil {
			b.Fatal(err)
		}
		firstPublish = max(firstPublish, time.Since(t))

		t = time.Now()
		lastGap = t
		stop := probe(q)
		var end time.Time // when the settling call let go of the lock for good
		var first []queue.Delivery[int]
		var st queue.Stats
		if dead {
			st = q.Stats()
		} else {
			first = q.TryPoll(1)
			end = time.Now()
		}
		settle += time.Since(t)

		b.StopTimer()
		pub, wait := stop() // after this, whoever did the sweep is done
		maxPublish, maxWait = max(maxPublish, pub), max(maxWait, wait)
		if dead {
			end = firstLetter
			if st.InFlight != 0 || letters != n {
				b.Fatalf("after expiry: %+v, %d dead letters", st, letters)
			}
		} else if len(first) != 1 || first[0].Attempt < 2 {
			b.Fatalf("first TryPoll after expiry = %+v", first)
		}
		maxHold = max(maxHold, end.Sub(lastGap))
		b.StartTimer()
		if !dead {
			if got := 1 + leaseAll(); got < n {
				b.Fatalf("redelivered %d, want at least %d", got, n)
			}
		}
	}
	b.StopTimer()
	msgsTotal := float64(b.N) * float64(n)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(settle.Nanoseconds())/msgsTotal, "settle-ns/msg")
	if !dead {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgsTotal, "redeliver-ns/msg")
	}
	b.ReportMetric(float64(maxHold.Microseconds())/1e3, "max-hold-ms")
	b.ReportMetric(float64(maxPublish.Microseconds())/1e3, "max-publish-ms")
	b.ReportMetric(float64(firstPublish.Microseconds())/1e3, "first-publish-ms")
	b.ReportMetric(float64(maxWait.Microseconds())/1e3, "max-lockwait-ms")
}

// probe starts the two goroutines that time an Offer and taking q's lock,
// each every 100 µs from 1 ms on (an Offer that came first would do the
// sweep itself); stop ends them and returns the longest of each.

func probe(q *Queue[int]) (stop func() (publish, lockWait time.Duration)) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var pub, wait time.Duration
	loop := func(f func() time.Duration, worst *time.Duration) {
		time.Sleep(time.Millisecond) // the settling call takes the lock first
		for {
			time.Sleep(100 * time.Microsecond)
			select {
			case <-done:
				return
			default:
			}
			*worst = max(*worst, f())
		}
	}
	msg := &queue.Message[int]{Payload: -1}
	wg.Go(func() {
		loop(func() time.Duration {
			t := time.Now()
			if err := q.Offer(context.Background(), msg, 0); err != nil {
				panic(err)
			}
			return time.Since(t)
		}, &pub)
	})
	wg.Go(func() {
		loop(func() time.Duration {
			t := time.Now()
			q.mu.Lock()
			d := time.Since(t)
			q.mu.Unlock()
			return d
		}, &wait)
	})
	return func() (time.Duration, time.Duration) {
		close(done)
		wg.Wait()
		return pub, wait
	}
}
