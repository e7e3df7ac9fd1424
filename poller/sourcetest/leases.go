package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// The lease cases: polling, settling, extension, redelivery, release.

func (s *suite) testPollBatch(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "batch", s.opts())
	want := []string{"m0", "m1", "m2", "m3", "m4"}
	s.publish(t, topic, want...)
	seen := map[string]bool{}
	ids := map[lease.ID]bool{}
	for len(seen) < len(want) {
		ds, err := sub.Poll(s.bounded(t), 3)
		ok(t, "Poll(3)", err)
		if len(ds) < 1 || len(ds) > 3 {
			t.Fatalf("Poll(3) returned %d deliveries, want 1 to 3", len(ds))
		}
		for _, d := range ds {
			if seen[d.Payload] {
				t.Fatalf("%q delivered twice", d.Payload)
			}
			if ids[d.LeaseID] {
				t.Fatalf("lease id %v issued twice", d.LeaseID)
			}
			seen[d.Payload], ids[d.LeaseID] = true, true
			check(t, d, d.Payload, 1)
			ok(t, "Ack", sub.Ack(d.LeaseID))
		}
	}
	for _, p := range want {
		if !seen[p] {
			t.Fatalf("%q never delivered", p)
		}
	}
}

func (s *suite) testPollInvalidN(t *testing.T) {
	sub := s.subscribe(t, s.topic(t), "invalid", s.opts())
	for _, n := range []int{0, -1} {
		if _, err := sub.Poll(s.bounded(t), n); err == nil {
			t.Fatalf("Poll(ctx, %d) succeeded, want an error", n)
		}
	}
}

func (s *suite) testPollBlocks(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "blocks", s.opts())
	type result struct {
		ds  []queue.Delivery[string]
		err error
	}
	done := make(chan result, 1)
	go func() {
		ds, err := sub.Poll(s.bounded(t), 5)
		done <- result{ds, err}
	}()
	if s.caps.FakeClock {
		ok(t, "AwaitParked", s.h.AwaitParked(s.bounded(t), sub, 1))
	}
	s.publish(t, topic, "late")
	r := <-done
	ok(t, "blocked Poll", r.err)
	if len(r.ds) != 1 {
		t.Fatalf("blocked Poll returned %d deliveries, want 1", len(r.ds))
	}
	check(t, r.ds[0], "late", 1)
	ok(t, "Ack", sub.Ack(r.ds[0].LeaseID))
}

func (s *suite) testPollContextDoneBefore(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "done", s.opts())
	s.publish(t, topic, "kept")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ds, err := sub.Poll(ctx, 1)
	errIs(t, "Poll with a done context", err, context.Canceled)
	if len(ds) != 0 {
		t.Fatalf("Poll with a done context leased %d messages", len(ds))
	}
	// Nothing was leased, so no attempt was spent.
	d := s.pollOne(t, sub)
	check(t, d, "kept", 1)
	ok(t, "Ack", sub.Ack(d.LeaseID))
}

func (s *suite) testPollContextEnds(t *testing.T) {
	sub := s.subscribe(t, s.topic(t), "ends", s.opts())
	ctx, cancel := context.WithCancel(s.bounded(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		ds, err := sub.Poll(ctx, 1)
		if len(ds) != 0 {
			err = fmt.Errorf("leased %d messages", len(ds))
		}
		done <- err
	}()
	if s.caps.FakeClock {
		ok(t, "AwaitParked", s.h.AwaitParked(s.bounded(t), sub, 1))
	} else {
		// Give the Poll time to block: it must return when ctx ends
		// whether or not it has.
		s.elapse(t, s.unit)
	}
	cancel()
	select {
	case err := <-done:
		errIs(t, "Poll whose context ends", err, context.Canceled)
	case <-time.After(hangGuard):
		t.Fatalf("Poll did not return within %v of its context ending", hangGuard)
	}
}

func (s *suite) testAckDeletes(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "ack", s.opts())
	s.publish(t, topic, "a")
	d := s.pollOne(t, sub)
	check(t, d, "a", 1)
	ok(t, "Ack", sub.Ack(d.LeaseID))
	// Past the visibility timeout: an acked message never comes back.
	s.expectNoneAfter(t, sub, s.vis+s.unit)
}

func (s *suite) testAckTwice(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "twice", s.opts())
	s.publish(t, topic, "a")
	d := s.pollOne(t, sub)
	ok(t, "first Ack", sub.Ack(d.LeaseID))
	errIs(t, "second Ack", sub.Ack(d.LeaseID), queue.ErrLeaseNotFound)
}

// testAckBatch: a backend.BatchAcker acks what it can of a batch and says,
// lease by lease, what it could not (a *queue.BatchError in the batch's
// order); what it acked never comes back.
func (s *suite) testAckBatch(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "ackbatch", s.opts())
	ba, isBA := sub.(backend.BatchAcker)
	if !isBA {
		t.Skip("the subscription is not a backend.BatchAcker: the backend has no AckBatch")
	}
	ok(t, "AckBatch of none", ba.AckBatch(nil))
	s.publish(t, topic, "a", "b", "c")
	byPayload := map[string]lease.ID{}
	for len(byPayload) < 3 {
		ds, err := sub.Poll(s.bounded(t), 3)
		ok(t, "Poll(3)", err)
		for _, d := range ds {
			byPayload[d.Payload] = d.LeaseID
		}
	}
	ok(t, "Ack of b", sub.Ack(byPayload["b"]))
	err := ba.AckBatch([]lease.ID{byPayload["a"], byPayload["b"], byPayload["c"]})
	var be *queue.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 3 {
		t.Fatalf("AckBatch of a, acked b, c: err = %v, want a *queue.BatchError of 3", err)
	}
	ok(t, "AckBatch's a", be.Errs[0])
	errIs(t, "AckBatch's b, acked before", be.Errs[1], queue.ErrLeaseNotFound)
	ok(t, "AckBatch's c", be.Errs[2])
	errIs(t, "AckBatch's error", err, queue.ErrLeaseNotFound)
	errIs(t, "a second Ack of a", sub.Ack(byPayload["a"]), queue.ErrLeaseNotFound)
	s.expectNoneAfter(t, sub, s.vis+s.unit)
}

func (s *suite) testAckUnknown(t *testing.T) {
	sub := s.subscribe(t, s.topic(t), "unknown", s.opts())
	errIs(t, "Ack of a lease never issued", sub.Ack(lease.NewID(0xfeed, 42, 1)), queue.ErrLeaseNotFound)
	if err := sub.Ack(lease.ID{}); err == nil {
		t.Fatal("Ack of the zero lease id succeeded")
	}
	if err := sub.Nack(lease.NewID(0xfeed, 42, 1), 0); err == nil {
		t.Fatal("Nack of a lease never issued succeeded")
	}
}

func (s *suite) testNackDelay(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "nack", s.opts())
	s.publish(t, topic, "n")
	d1 := s.pollOne(t, sub)
	check(t, d1, "n", 1)
	delay := 2 * s.unit
	ok(t, "Nack", sub.Nack(d1.LeaseID, delay))
	// Not visible before the delay...
	if s.caps.FakeClock {
		s.elapse(t, delay-time.Nanosecond)
	}
	s.expectNone(t, sub, delay/2)
	if s.caps.FakeClock {
		s.elapse(t, time.Nanosecond)
	}
	// ...visible after it, its attempt spent.
	d2 := s.pollOne(t, sub)
	check(t, d2, "n", 2)
	if err := sub.Ack(d1.LeaseID); err == nil {
		t.Fatal("Ack of the nacked lease succeeded")
	}
	// A zero delay makes it visible at once.
	ok(t, "Nack(0)", sub.Nack(d2.LeaseID, 0))
	d3 := s.pollOne(t, sub)
	check(t, d3, "n", 3)
	ok(t, "Ack", sub.Ack(d3.LeaseID))
}

func (s *suite) testFailBackoff(t *testing.T) {
	topic := s.topic(t)
	o := s.opts()
	sub := s.subscribe(t, topic, "fail", o)
	s.publish(t, topic, "f")
	for attempt := 1; attempt <= 2; attempt++ {
		d := s.pollOne(t, sub)
		check(t, d, "f", attempt)
		ok(t, "Fail", sub.Fail(d.LeaseID, errors.New("boom")))
		delay := o.Retry().Delay(attempt) // 2 units, then 4
		if s.caps.FakeClock {
			s.elapse(t, delay-time.Nanosecond)
		}
		s.expectNone(t, sub, delay-s.unit)
		if s.caps.FakeClock {
			s.elapse(t, time.Nanosecond)
		}
	}
	d := s.pollOne(t, sub)
	check(t, d, "f", 3)
	ok(t, "Ack", sub.Ack(d.LeaseID))
}

func (s *suite) testExtend(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "extend", s.opts())
	s.publish(t, topic, "e")
	d := s.pollOne(t, sub)
	s.elapse(t, s.vis-s.unit) // 3 units into a 4-unit lease
	ok(t, "Extend", sub.Extend(d.LeaseID, s.vis))
	// Past the original deadline (4 units) and before the new one (7).
	if s.caps.FakeClock {
		s.elapse(t, 2*s.unit)
	}
	s.expectNone(t, sub, 2*s.unit)
	ok(t, "Ack after Extend", sub.Ack(d.LeaseID))
	s.expectNoneAfter(t, sub, s.vis)
}

func (s *suite) testExtendArbitrary(t *testing.T) {
	s.require(t, s.caps.ArbitraryExtend, "ArbitraryExtend", "Extend only resets the lease to the visibility timeout")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "extend-long", s.opts())
	s.publish(t, topic, "e")
	d := s.pollOne(t, sub)
	ok(t, "Extend(3 × visibility)", sub.Extend(d.LeaseID, 3*s.vis))
	s.expectNoneAfter(t, sub, 2*s.vis)
	ok(t, "Ack after a long Extend", sub.Ack(d.LeaseID))
}

func (s *suite) testExtendInvalid(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "extend-invalid", s.opts())
	s.publish(t, topic, "e")
	d := s.pollOne(t, sub)
	for _, to := range []time.Duration{0, -time.Second} {
		if err := sub.Extend(d.LeaseID, to); err == nil {
			t.Fatalf("Extend(%v) succeeded, want an error", to)
		}
	}
	ok(t, "Ack", sub.Ack(d.LeaseID))
}

func (s *suite) testAttempts(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "attempts", s.opts())
	s.publish(t, topic, "x")
	for attempt := 1; attempt <= 3; attempt++ {
		d := s.pollOne(t, sub)
		check(t, d, "x", attempt)
		if attempt < 3 {
			ok(t, "Nack(0)", sub.Nack(d.LeaseID, 0))
		} else {
			ok(t, "Ack", sub.Ack(d.LeaseID))
		}
	}
}

// expire polls a delivery and lets its lease run out unsettled.
func (s *suite) expire(t *testing.T, sub Subscription) queue.Delivery[string] {
	t.Helper()
	d := s.pollOne(t, sub)
	s.elapse(t, s.vis)
	return d
}

func (s *suite) testRedelivery(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "redeliver", s.opts())
	s.publish(t, topic, "r")
	d1 := s.expire(t, sub)
	check(t, d1, "r", 1)
	d2 := s.pollOne(t, sub)
	check(t, d2, "r", 2)
	if d2.LeaseID == d1.LeaseID {
		t.Fatalf("redelivery reused lease id %v", d1.LeaseID)
	}
	if err := sub.Nack(d1.LeaseID, 0); err == nil {
		t.Fatal("Nack of the superseded lease succeeded")
	}
	if err := sub.Extend(d1.LeaseID, s.vis); err == nil {
		t.Fatal("Extend of the superseded lease succeeded")
	}
	ok(t, "Ack of the current lease", sub.Ack(d2.LeaseID))
}

func (s *suite) testStaleAck(t *testing.T) {
	s.require(t, s.caps.StaleAck, "StaleAck", "an Ack with a superseded lease is not told apart from an unknown one")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "stale", s.opts())
	s.publish(t, topic, "s")
	d1 := s.expire(t, sub)
	d2 := s.pollOne(t, sub)
	check(t, d2, "s", 2)
	errIs(t, "Ack of the superseded lease", sub.Ack(d1.LeaseID), queue.ErrLeaseExpired)
	// It changed nothing: the new holder still owns the message.
	ok(t, "Ack of the current lease", sub.Ack(d2.LeaseID))
}

func (s *suite) testLateAck(t *testing.T) {
	s.require(t, s.caps.LateAck, "LateAck", "an Ack after the deadline is not guaranteed to delete the message")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "late", s.opts())
	s.publish(t, topic, "l")
	d := s.expire(t, sub)
	ok(t, "late Ack", sub.Ack(d.LeaseID))
	s.expectNoneAfter(t, sub, s.vis)
}

func (s *suite) testSettleAfterDeadline(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "after-deadline", s.opts())
	s.publish(t, topic, "d")
	d := s.expire(t, sub)
	errIs(t, "Nack after the deadline", sub.Nack(d.LeaseID, 0), queue.ErrLeaseExpired)
	errIs(t, "Extend after the deadline", sub.Extend(d.LeaseID, s.vis), queue.ErrLeaseExpired)
	errIs(t, "Fail after the deadline", sub.Fail(d.LeaseID, errors.New("late")), queue.ErrLeaseExpired)
	d2 := s.pollOne(t, sub)
	check(t, d2, "d", 2)
	ok(t, "Ack", sub.Ack(d2.LeaseID))
}

func (s *suite) testRelease(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "release", s.opts())
	s.publish(t, topic, "r")
	d1 := s.pollOne(t, sub)
	ok(t, "Release", sub.Release(d1.LeaseID))
	d2 := s.pollOne(t, sub) // visible at once: no clock move
	if d2.Payload != "r" {
		t.Fatalf("after Release got %q", d2.Payload)
	}
	if err := sub.Ack(d1.LeaseID); err == nil {
		t.Fatal("Ack of the released lease succeeded")
	}
	ok(t, "Ack", sub.Ack(d2.LeaseID))
}

func (s *suite) testReleaseKeepsAttempt(t *testing.T) {
	s.require(t, s.caps.ReleaseKeepsAttempt, "ReleaseKeepsAttempt", "Release counts as a delivery, so the next Attempt is one higher")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "release-keeps", s.opts())
	s.publish(t, topic, "r")
	d1 := s.pollOne(t, sub)
	ok(t, "Release", sub.Release(d1.LeaseID))
	d2 := s.pollOne(t, sub)
	check(t, d2, "r", 1)
	ok(t, "Ack", sub.Ack(d2.LeaseID))
}

// deadLetters waits for n dead letters of sub.
