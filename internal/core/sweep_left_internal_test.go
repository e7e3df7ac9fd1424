package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// An Offer that the due sweep cannot change (room, an unheld key, no
// fairness) does not do it, whatever way it takes the lock: a publish
// never waits for a million expiries it did not find. It leaves the sweep
// at its own time, and the next call that reads the clock does it there,
// then settles at its own: the outcome is the one an Offer that swept
// first gives, to the dead letters' times.
func TestOfferLeavesTheSweepToTheNextCall(t *testing.T) {
	const n, chunk = 40, 4
	for _, tc := range []struct {
		name  string
		offer func(q *Queue[int]) error
	}{
		{"delayed", func(q *Queue[int]) error {
			return q.Offer(context.Background(), &queue.Message[int]{Payload: 1000}, time.Second)
		}},
		{"keyed", func(q *Queue[int]) error {
			return q.Offer(context.Background(), &queue.Message[int]{Payload: 1000, Key: "k"}, 0)
		}},
		{"with a TTL", func(q *Queue[int]) error {
			return q.Offer(context.Background(), &queue.Message[int]{Payload: 1000}, 0, WithTTL(2*time.Hour))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var letters []Letter[int]
			q, mock, _ := sweepQueue(t, queue.Config{MaxAttempts: 2}, chunk, n/2, func(l Letter[int]) { letters = append(letters, l) })
			// Payloads 0..n/2-1 on their last attempt expire into the dead
			// letters; n/2..n-1 on their first come back.
			if ds := q.TryPoll(n); len(ds) != n/2 {
				t.Fatalf("leased %d again, want %d", len(ds), n/2)
			}
			for i := n / 2; i < n; i++ {
				if err := q.Offer(context.Background(), &queue.Message[int]{Payload: i}, 0); err != nil {
					t.Fatal(err)
				}
			}
			if ds := q.TryPoll(n); len(ds) != n/2 {
				t.Fatalf("leased %d, want %d", len(ds), n/2)
			}
			mock.Add(time.Minute)
			offeredAt := mock.Now()
			gaps := 0
			q.testHooks().gap = func() { gaps++ }
			if err := tc.offer(q); err != nil {
				t.Fatal(err)
			}
			if gaps != 0 || len(letters) != 0 {
				t.Fatalf("the Offer swept: %d gaps, %d dead letters", gaps, len(letters))
			}
			mock.Add(time.Hour) // the next call comes later
			st := q.Stats()
			if st.DeadLettered != n/2 || st.InFlight != 0 || st.Visible != n/2+1 {
				t.Fatalf("Stats after = %+v", st)
			}
			if gaps == 0 {
				t.Error("Stats did not sweep in chunks")
			}
			for _, l := range letters {
				if !l.At.Equal(offeredAt) {
					t.Fatalf("a dead letter at %v, want the Offer's time %v", l.At, offeredAt)
				}
			}
			ds := q.TryPoll(n)
			if len(ds) != n/2+1 {
				t.Fatalf("%d delivered, want %d", len(ds), n/2+1)
			}
			for i, d := range ds[:n/2] {
				if d.Attempt != 2 || (i > 0 && d.Payload < ds[i-1].Payload) {
					t.Fatalf("redelivery %d: %+v, want attempt 2 in place order", i, d)
				}
			}
			if last := ds[n/2]; last.Payload != 1000 {
				t.Errorf("delivered last: %+v, want the offered message", last)
			}
		})
	}
}

// An Offer that the sweep could change still sweeps first: one past the
// bound, which the sweep's dead letters make room for.
func TestOfferSweepsWhenItCanTell(t *testing.T) {
	const n = 40
	q, mock, _ := sweepQueue(t, queue.Config{MaxAttempts: 1, MaxQueue: n, Overflow: queue.OverflowReject}, 4, n, nil)
	mock.Add(time.Minute)
	var full *queue.FullError
	if err := q.Offer(context.Background(), &queue.Message[int]{Payload: 1000}, time.Second); errors.As(err, &full) {
		t.Fatalf("Offer at the bound = %v, want room made by the expired leases' dead letters", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.DeadLettered != n || st.Delayed != 1 {
		t.Errorf("Stats = %+v", st)
	}
}
