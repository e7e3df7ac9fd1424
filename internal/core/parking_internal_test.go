package core

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// A Poll made with a Parking marks it while parked, with its wake-up: the
// mark is exact at every instant, with no wait for the Poll's goroutine.
// A publish clears it before Offer returns; a clock at the wake-up reads
// it as not parked; the Poll's own return clears it.
func TestParkingFollowsThePoll(t *testing.T) {
	q, mock := newIdleQueue(t, queue.Config{VisibilityTimeout: 10 * time.Second})
	notified := make(chan struct{}, 16)
	pk := backend.NewParking(func() { notified <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	poll := func() <-chan []queue.Delivery[string] {
		got := make(chan []queue.Delivery[string], 1)
		go func() {
			ds, _, _ := q.PollFor(ctx, backend.PollRequest[string]{Max: 1, Parking: pk})
			got <- ds
		}()
		if err := q.AwaitParked(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		return got
	}

	// Untimed: nothing in the queue, so only a change wakes it.
	got := poll()
	now := mock.Now()
	if !pk.Parked(now) || !pk.Parked(now.Add(time.Hour)) {
		t.Fatal("an untimed parked Poll does not read as parked")
	}
	offer(t, q, "a", 0)
	if pk.Parked(now) {
		t.Fatal("still parked after the Offer that woke it returned")
	}
	if ds := <-got; len(ds) != 1 {
		t.Fatalf("woken Poll: %v", ds)
	}

	// Timed: a delayed message wakes it at its time.
	offer(t, q, "b", 5*time.Second)
	got = poll()
	if !pk.Parked(now) {
		t.Fatal("a timed parked Poll does not read as parked")
	}
	if pk.Parked(now.Add(5 * time.Second)) {
		t.Fatal("parked at its wake-up time: its goroutine is on its way")
	}
	mock.Add(5 * time.Second)
	if ds := <-got; len(ds) != 1 || ds[0].Payload != "b" {
		t.Fatalf("timed Poll: %v", ds)
	}
	if pk.Parked(mock.Now()) {
		t.Fatal("parked after the Poll returned")
	}

	// Its context ends: no longer parked.
	got = poll()
	cancel()
	<-got
	if pk.Parked(mock.Now()) {
		t.Fatal("parked after its context ended")
	}
	if len(notified) == 0 {
		t.Fatal("no change was notified")
	}
}

// An AwaitIdle made with a Parking marks it while it waits: the ack that
// empties the queue clears it before Ack returns; a clock at the next due
// event reads it as not parked.
func TestParkingFollowsAwaitIdle(t *testing.T) {
	q, mock := newIdleQueue(t, queue.Config{VisibilityTimeout: 10 * time.Second})
	pk := backend.NewParking(nil)
	ctx := context.Background()
	offer(t, q, "a", 0)
	d := pollNow(t, q)
	done := make(chan error, 1)
	go func() { done <- q.AwaitIdleFor(ctx, pk) }()
	now := mock.Now()
	guard := time.Now().Add(idleGuard)
	for !pk.Parked(now) { // no channel announces that it waits
		if time.Now().After(guard) {
			t.Fatal("AwaitIdle never parked")
		}
		runtime.Gosched()
	}
	if pk.Parked(now.Add(10 * time.Second)) {
		t.Fatal("parked at the lease's deadline, when time alone can empty the queue")
	}
	if err := q.Ack(d.LeaseID); err != nil {
		t.Fatal(err)
	}
	if pk.Parked(now) {
		t.Fatal("still parked after the Ack that emptied the queue returned")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A PollFor that asks for a Hold longer than the visibility timeout
// leases for it and says so; a shorter one and a TryPoll keep the
// queue's; a bad request is refused.
func TestPollForHold(t *testing.T) {
	q, mock := newIdleQueue(t, queue.Config{VisibilityTimeout: 10 * time.Second})
	for range 3 {
		offer(t, q, "m", 0)
	}
	now := mock.Now()
	poll := func(hold time.Duration) (queue.Delivery[string], bool) {
		t.Helper()
		ds, held, err := q.PollFor(context.Background(), backend.PollRequest[string]{Max: 1, Hold: hold})
		if err != nil || len(ds) != 1 {
			t.Fatalf("PollFor: %v, %v", ds, err)
		}
		return ds[0], held
	}
	if d, held := poll(time.Hour); !d.Deadline.Equal(now.Add(time.Hour)) || !held {
		t.Fatalf("deadline %v, held %v: want the hold's, held", d.Deadline.Sub(now), held)
	}
	if d, held := poll(5 * time.Second); !d.Deadline.Equal(now.Add(10*time.Second)) || held {
		t.Fatalf("deadline %v, held %v: want the visibility timeout's, not held", d.Deadline.Sub(now), held)
	}
	if ds := q.TryPoll(1); len(ds) != 1 || !ds[0].Deadline.Equal(now.Add(10*time.Second)) {
		t.Fatalf("TryPoll: %v", ds)
	}
	for _, req := range []backend.PollRequest[string]{{Max: 0}, {Max: -1}, {Max: 1, Hold: -time.Second}} {
		if _, _, err := q.PollFor(context.Background(), req); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Fatalf("PollFor(%+v): %v, want ErrInvalidArgument", req, err)
		}
	}
}
