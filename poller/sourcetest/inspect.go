package sourcetest

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// Pauser pauses and resumes a subscription's deliveries: while it is
// paused, a Poll waits, publishes are still taken and leases in flight
// still settle.
type Pauser interface {
	Pause(ctx context.Context, sub Subscription) error
	Resume(ctx context.Context, sub Subscription) error
}

// Peeker shows up to limit of the messages a subscription holds, in
// arrival order, with where each waits, leasing and changing nothing.
type Peeker interface {
	Peek(ctx context.Context, sub Subscription, limit int) ([]queue.Held[string], error)
}

func (s *suite) testPause(t *testing.T) {
	pz := need[Pauser](t, s.h, "Pauser", "pause")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "pause", s.opts())
	s.publish(t, topic, "z0")
	ok(t, "Pause", pz.Pause(s.bounded(t), sub))
	type result struct {
		ds  []queue.Delivery[string]
		err error
	}
	got := make(chan result, 1)
	go func() {
		ds, err := sub.Poll(s.bounded(t), 1)
		got <- result{ds, err}
	}()
	// blocked checks that the Poll waits: on a fake clock once it has
	// parked, on real time for a unit.
	blocked := func(what string) {
		t.Helper()
		var r result
		if s.caps.FakeClock {
			ok(t, "AwaitParked"+what, s.h.AwaitParked(s.bounded(t), sub, 1))
			select {
			case r = <-got:
			default:
				return
			}
		} else {
			select {
			case r = <-got:
			case <-time.After(s.unit):
				return
			}
		}
		t.Fatalf("a paused subscription's Poll returned %v, %v%s", r.ds, r.err, what)
	}
	blocked("")
	s.publish(t, topic, "z1") // taken while paused
	blocked(" after a publish")
	ok(t, "Resume", pz.Resume(s.bounded(t), sub))
	r := <-got
	ok(t, "Poll after Resume", r.err)
	if len(r.ds) != 1 {
		t.Fatalf("Poll after Resume: %d deliveries", len(r.ds))
	}
	check(t, r.ds[0], "z0", 1)
	ok(t, "Ack", sub.Ack(r.ds[0].LeaseID))
	d := s.pollOne(t, sub)
	check(t, d, "z1", 1)
	ok(t, "Ack", sub.Ack(d.LeaseID))
}

func (s *suite) testPeek(t *testing.T) {
	pk := need[Peeker](t, s.h, "Peeker", "peek")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "peek", s.opts())
	s.publish(t, topic, "k0", "k1", "k2")
	held := s.pollOne(t, sub)
	check(t, held, "k0", 1)
	hs, err := pk.Peek(s.bounded(t), sub, 10)
	ok(t, "Peek", err)
	type view struct {
		payload  string
		state    queue.State
		attempts int
	}
	want := []view{{"k0", queue.StateInFlight, 1}, {"k1", queue.StateVisible, 0}, {"k2", queue.StateVisible, 0}}
	if len(hs) != len(want) {
		t.Fatalf("Peek returned %d messages, want %d", len(hs), len(want))
	}
	for i, h := range hs {
		if got := (view{h.Payload, h.State, h.Attempts}); got != want[i] {
			t.Errorf("Peek[%d] = %+v, want %+v", i, got, want[i])
		}
	}
	// Peeking leased nothing: the next two are delivered for the first time.
	for _, p := range []string{"k1", "k2"} {
		d := s.pollOne(t, sub)
		check(t, d, p, 1)
		ok(t, "Ack", sub.Ack(d.LeaseID))
	}
	ok(t, "Ack", sub.Ack(held.LeaseID))
	hs, err = pk.Peek(s.bounded(t), sub, 10)
	ok(t, "Peek", err)
	if len(hs) != 0 {
		t.Fatalf("Peek of an empty subscription returned %d messages", len(hs))
	}
}
