package core

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/testkit"
	"github.com/leasebus/leasebus/queue"
)

func offerKeyed(t *testing.T, q *Queue[string], key, payload string) {
	t.Helper()
	if err := q.Offer(context.Background(), &queue.Message[string]{Key: key, Payload: payload}, 0); err != nil {
		t.Fatal(err)
	}
}

// A key's bucket is kept until it is full again, and a fair key's turn
// while it has visible messages: the memory of 10^5 keys served is let go
// once their period has passed, not kept for every key ever seen.
func TestLimitsForgetKeys(t *testing.T) {
	keys := testkit.Scale(100_000, 10_000)
	q, mock := newIdleQueue(t, queue.Config{
		KeyRateLimit: queue.Rate{N: 1, Per: time.Second},
		FairKeys:     true,
		MaxQueue:     2 * keys,
	})
	for i := range keys {
		offerKeyed(t, q, fmt.Sprint(i), "x")
	}
	q.mu.Lock()
	turns := len(q.ready.fair.last)
	q.mu.Unlock()
	if turns != keys {
		t.Fatalf("%d keys with a turn kept, want %d (each has a visible message)", turns, keys)
	}
	for n := 0; n < keys; {
		ds := q.TryPoll(1000)
		if len(ds) == 0 {
			t.Fatalf("TryPoll found nothing after %d of %d", n, keys)
		}
		for _, d := range ds {
			if err := q.Ack(d.LeaseID); err != nil {
				t.Fatal(err)
			}
		}
		n += len(ds)
	}
	q.mu.Lock()
	buckets, turns := len(q.keyFull), len(q.ready.fair.last)
	q.mu.Unlock()
	if buckets != keys || turns != 0 {
		t.Fatalf("%d buckets and %d turns kept, want %d (none full again yet) and 0", buckets, turns, keys)
	}

	mock.Add(time.Second) // every bucket is full again
	offerKeyed(t, q, "new", "y")
	if ds := q.TryPoll(1); len(ds) != 1 {
		t.Fatalf("TryPoll: %d deliveries, want the new key's", len(ds))
	}
	q.mu.Lock()
	buckets = len(q.keyFull)
	q.mu.Unlock()
	if buckets != 1 {
		t.Fatalf("%d buckets kept, want 1: the full ones are forgotten", buckets)
	}
}
