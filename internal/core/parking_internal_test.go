package core

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// A Poll made with a Parking marks it while parked, with its wake-up: the
// mark is exact at every instant, with no wait for the Poll's goroutine.
// A publish clears it before Offer returns; a clock at the wake-up reads
// it as not parked; the Poll's own return clears it.
func TestParkingFollowsThePoll(t *testing.T) {
	q, mock := newIdleQueue(t, queue.Config{VisibilityTimeout: 10 * time.Second})
	notified := make(chan struct{}, 16)
	pk := NewParking(func() { notified <- struct{}{} })
	ctx, cancel := context.WithCancel(WithHooks(context.Background(), &PollHooks{Parking: pk}))
	defer cancel()

	poll := func() <-chan []queue.Delivery[string] {
		got := make(chan []queue.Delivery[string], 1)
		go func() {
			ds, _ := q.Poll(ctx, 1)
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
	pk := NewParking(nil)
	ctx := WithHooks(context.Background(), &PollHooks{Parking: pk})
	offer(t, q, "a", 0)
	d := pollNow(t, q)
	done := make(chan error, 1)
	go func() { done <- q.AwaitIdle(ctx) }()
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

// A Poll whose hooks ask for a Hold longer than the visibility timeout
// leases for it and says so; a shorter one, an explicit visibility and a
// TryPoll keep their own.
func TestPollHooksHold(t *testing.T) {
	q, mock := newIdleQueue(t, queue.Config{VisibilityTimeout: 10 * time.Second})
	for range 4 {
		offer(t, q, "m", 0)
	}
	now := mock.Now()
	poll := func(h *PollHooks, vis time.Duration) queue.Delivery[string] {
		t.Helper()
		ctx := WithHooks(context.Background(), h)
		var ds []queue.Delivery[string]
		var err error
		if vis > 0 {
			ds, err = q.PollWithVisibility(ctx, 1, vis)
		} else {
			ds, err = q.Poll(ctx, 1)
		}
		if err != nil || len(ds) != 1 {
			t.Fatalf("Poll: %v, %v", ds, err)
		}
		return ds[0]
	}
	long := &PollHooks{Hold: time.Hour}
	if d := poll(long, 0); !d.Deadline.Equal(now.Add(time.Hour)) || !long.TakeHeld() || long.TakeHeld() {
		t.Fatalf("deadline %v, want the hold's; TakeHeld true once", d.Deadline.Sub(now))
	}
	short := &PollHooks{Hold: 5 * time.Second}
	if d := poll(short, 0); !d.Deadline.Equal(now.Add(10*time.Second)) || short.TakeHeld() {
		t.Fatalf("deadline %v, want the visibility timeout's, not held", d.Deadline.Sub(now))
	}
	if d := poll(long, time.Minute); !d.Deadline.Equal(now.Add(time.Minute)) || long.TakeHeld() {
		t.Fatalf("deadline %v, want the explicit visibility's, not held", d.Deadline.Sub(now))
	}
	if ds := q.TryPoll(1); len(ds) != 1 || !ds[0].Deadline.Equal(now.Add(10*time.Second)) {
		t.Fatalf("TryPoll: %v", ds)
	}
}
