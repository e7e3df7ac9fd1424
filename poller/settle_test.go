package poller_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// slowSettle is a broker subscription whose Ack and Nack wait for the test,
// as a remote source's round trips do: each announces itself on entered
// and goes on when the test sends on proceed.
type slowSettle struct {
	*broker.Subscription[string]
	entered chan string // "ack" or "nack", when the call starts
	proceed chan struct{}
	polls   atomic.Int64 // Polls started
	nacking atomic.Bool  // a Nack is in progress
	early   atomic.Int64 // Polls started while a Nack was in progress
}

func newSlowSettle(sub *broker.Subscription[string]) *slowSettle {
	return &slowSettle{Subscription: sub, entered: make(chan string, 8), proceed: make(chan struct{})}
}

func (s *slowSettle) Poll(ctx context.Context, n int) ([]queue.Delivery[string], error) {
	s.polls.Add(1)
	if s.nacking.Load() {
		s.early.Add(1)
	}
	return s.Subscription.Poll(ctx, n)
}

func (s *slowSettle) PollFor(ctx context.Context, req backend.PollRequest[string]) ([]queue.Delivery[string], bool, error) {
	s.polls.Add(1)
	if s.nacking.Load() {
		s.early.Add(1)
	}
	return s.Subscription.PollFor(ctx, req)
}

func (s *slowSettle) Ack(id lease.ID) error {
	s.entered <- "ack"
	<-s.proceed
	return s.Subscription.Ack(id)
}

func (s *slowSettle) Nack(id lease.ID, d time.Duration) error {
	s.nacking.Store(true)
	defer s.nacking.Store(false)
	s.entered <- "nack"
	<-s.proceed
	return s.Subscription.Nack(id, d)
}

// FailAfter is what RetryAfter settles with on a source that has it.
func (s *slowSettle) FailAfter(id lease.ID, d time.Duration, cause error) error {
	s.nacking.Store(true)
	defer s.nacking.Store(false)
	s.entered <- "fail-after"
	<-s.proceed
	return s.Subscription.FailAfter(id, d, cause)
}

// With the defaults (one worker, nothing prefetched), the poll for the next
// message overlaps the Ack of the last: the message's slot is free once
// its handler has returned nil. Before, the poller polled only after the
// Ack returned, so on a remote source every message cost a Poll and an Ack
// in sequence.
func TestPollOverlapsAck(t *testing.T) {
	_, b, sub := newBroker(t)
	src := newSlowSettle(sub)
	publish(t, b, "m1", "m2")
	var handled []string
	p, err := poller.New[string](src, func(_ context.Context, d queue.Delivery[string]) error {
		handled = append(handled, d.Payload) // one worker: no race
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	t.Cleanup(func() { close(src.proceed) }) // before the run's own: a failed test lets the settles go
	if got := recv(t, src.entered); got != "ack" {
		t.Fatalf("first settle %q, want ack", got)
	}
	// m1's Ack is in flight: the poller leases m2 meanwhile, but does not
	// start it (its one worker is busy with the Ack).
	eventually(t, func() bool { st := p.Stats(); return st.Polled == 2 && st.InFlight == 1 })
	if st := p.Stats(); st.Running != 0 {
		t.Fatalf("while m1's Ack is in flight %d handlers run, want 0", st.Running)
	}
	if st := sub.Stats(); st.InFlight != 2 {
		t.Fatalf("while m1's Ack is in flight the source has %d leased, want 2 (m1, m2)", st.InFlight)
	}
	src.proceed <- struct{}{}
	if got := recv(t, src.entered); got != "ack" {
		t.Fatalf("second settle %q, want ack", got)
	}
	src.proceed <- struct{}{}
	eventually(t, func() bool { return p.Stats().Acked == 2 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if len(handled) != 2 || handled[0] != "m1" || handled[1] != "m2" {
		t.Fatalf("handled %q, want [m1 m2]", handled)
	}
	if st := sub.Stats(); st.Acked != 2 || st.InFlight+st.Visible != 0 {
		t.Fatalf("source: acked %d, in flight %d, visible %d", st.Acked, st.InFlight, st.Visible)
	}
}

// A message that goes back to the source is settled before its slot is
// free: with one worker, a RetryAfter(0) is handled again before the next
// message, as it keeps its place at the source.
func TestRetrySettledBeforeNextPoll(t *testing.T) {
	_, b, sub := newBroker(t)
	src := newSlowSettle(sub)
	publish(t, b, "m1", "m2")
	var handled []string
	p, err := poller.New[string](src, func(_ context.Context, d queue.Delivery[string]) error {
		handled = append(handled, d.Payload)
		if d.Payload == "m1" && d.Attempt == 1 {
			return poller.RetryAfter(0, errors.New("again"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	t.Cleanup(func() { close(src.proceed) }) // before the run's own: a failed test lets the settles go
	for _, want := range []string{"fail-after", "ack", "ack"} {
		if got := recv(t, src.entered); got != want {
			t.Fatalf("settle %q, want %q", got, want)
		}
		src.proceed <- struct{}{}
	}
	eventually(t, func() bool { return p.Stats().Acked == 2 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if len(handled) != 3 || handled[0] != "m1" || handled[1] != "m1" || handled[2] != "m2" {
		t.Fatalf("handled %q, want [m1 m1 m2]", handled)
	}
	if n := src.early.Load(); n != 0 {
		t.Fatalf("%d Polls started while a Nack was in flight", n)
	}
}
