package sourcetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// The dead-letter, fan-out, priority and close cases.

func (s *suite) deadLetters(t *testing.T, sub Subscription, n int) []DeadLetter {
	t.Helper()
	dls, err := s.h.DeadLetters(s.bounded(t), sub, n)
	ok(t, "DeadLetters", err)
	if len(dls) != n {
		t.Fatalf("%d dead letters, want %d: %+v", len(dls), n, dls)
	}
	return dls
}

func (s *suite) testMaxAttemptsFail(t *testing.T) {
	topic := s.topic(t)
	o := s.opts()
	o.MaxAttempts = 2
	o.RetryInitial = s.unit
	sub := s.subscribe(t, topic, "max-fail", o)
	s.publish(t, topic, "poison")
	d := s.pollOne(t, sub)
	ok(t, "Fail", sub.Fail(d.LeaseID, errors.New("boom 1")))
	s.elapse(t, s.unit)
	d = s.pollOne(t, sub)
	check(t, d, "poison", 2)
	ok(t, "Fail on the last attempt", sub.Fail(d.LeaseID, errors.New("boom 2")))
	dl := s.deadLetters(t, sub, 1)[0]
	if dl.Payload != "poison" || dl.Reason != queue.ReasonMaxAttempts || dl.Attempts != 2 || !strings.Contains(dl.LastError, "boom 2") {
		t.Fatalf("dead letter %+v, want poison, max-attempts, 2 attempts, last error boom 2", dl)
	}
	s.expectNoneAfter(t, sub, s.vis)
}

func (s *suite) testMaxAttemptsExpiry(t *testing.T) {
	topic := s.topic(t)
	o := s.opts()
	o.MaxAttempts = 1
	sub := s.subscribe(t, topic, "max-expire", o)
	s.publish(t, topic, "slow")
	s.expire(t, sub)
	dl := s.deadLetters(t, sub, 1)[0]
	if dl.Payload != "slow" || dl.Reason != queue.ReasonMaxAttempts || dl.Attempts != 1 || dl.LastError == "" {
		t.Fatalf("dead letter %+v, want slow, max-attempts, 1 attempt, a last error saying the lease expired", dl)
	}
	s.expectNoneAfter(t, sub, s.vis)
}

// testDeliveryMaxAttempts checks that each delivery carries the
// subscription's limit, and that a Fail of the delivery where Attempt
// reaches it dead-letters the message, as Delivery.MaxAttempts promises.
func (s *suite) testDeliveryMaxAttempts(t *testing.T) {
	topic := s.topic(t)
	o := s.opts()
	o.MaxAttempts = 2
	o.RetryInitial = s.unit
	sub := s.subscribe(t, topic, "max-delivery", o)
	other := s.subscribe(t, topic, "max-delivery-default", s.opts())
	s.publish(t, topic, "m")
	if d := s.pollOne(t, other); d.MaxAttempts != s.opts().MaxAttempts {
		t.Fatalf("delivery MaxAttempts %d, want the subscription's %d", d.MaxAttempts, s.opts().MaxAttempts)
	} else {
		ok(t, "Ack", other.Ack(d.LeaseID))
	}
	for attempt := 1; attempt <= 2; attempt++ {
		d := s.pollOne(t, sub)
		check(t, d, "m", attempt)
		if d.MaxAttempts != 2 {
			t.Fatalf("attempt %d: delivery MaxAttempts %d, want the subscription's 2", attempt, d.MaxAttempts)
		}
		if last := d.Attempt == d.MaxAttempts; last != (attempt == 2) {
			t.Fatalf("attempt %d: Attempt == MaxAttempts is %v", attempt, last)
		}
		ok(t, "Fail", sub.Fail(d.LeaseID, fmt.Errorf("boom %d", attempt)))
		if attempt == 1 {
			s.elapse(t, o.Retry().Delay(1))
		}
	}
	// The Fail on the last attempt dead-lettered it: it never comes back.
	dl := s.deadLetters(t, sub, 1)[0]
	if dl.Payload != "m" || dl.Reason != queue.ReasonMaxAttempts || dl.Attempts != 2 {
		t.Fatalf("dead letter %+v, want m, max-attempts, 2 attempts", dl)
	}
	s.expectNoneAfter(t, sub, s.vis+o.Retry().Delay(2))
}

func (s *suite) testFanOut(t *testing.T) {
	topic := s.topic(t)
	a := s.subscribe(t, topic, "fan-a", s.opts())
	b := s.subscribe(t, topic, "fan-b", s.opts())
	s.publish(t, topic, "x")
	da := s.pollOne(t, a)
	db := s.pollOne(t, b)
	check(t, da, "x", 1)
	check(t, db, "x", 1)
	ok(t, "Ack on a", a.Ack(da.LeaseID))
	if err := b.Ack(da.LeaseID); err == nil {
		t.Fatal("b accepted a's lease")
	}
	// b's copy is its own: a nack there redelivers on b only.
	ok(t, "Nack on b", b.Nack(db.LeaseID, 0))
	db2 := s.pollOne(t, b)
	check(t, db2, "x", 2)
	s.expectNone(t, a, s.unit)
	ok(t, "Ack on b", b.Ack(db2.LeaseID))
}

func (s *suite) testPriorities(t *testing.T) {
	s.require(t, s.caps.Priorities, "Priorities", "delivery is in publish order only")
	pp, isPP := s.h.(PriorityPublisher)
	if !isPP {
		t.Fatal("Capabilities.Priorities is set but the harness does not implement PriorityPublisher")
	}
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "prio", s.opts())
	for _, m := range []struct {
		payload string
		p       queue.Priority
	}{{"low", queue.PriorityLow}, {"normal", queue.PriorityNormal}, {"critical", queue.PriorityCritical}, {"high", queue.PriorityHigh}} {
		ok(t, "PublishPriority", pp.PublishPriority(s.bounded(t), topic, m.payload, m.p))
	}
	for _, want := range []string{"critical", "high", "normal", "low"} {
		d := s.pollOne(t, sub)
		check(t, d, want, 1)
		ok(t, "Ack", sub.Ack(d.LeaseID))
	}
}

func (s *suite) testClose(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "close", s.opts())
	s.publish(t, topic, "held")
	held := s.pollOne(t, sub)
	done := make(chan error, 1)
	go func() {
		_, err := sub.Poll(s.bounded(t), 1)
		done <- err
	}()
	if s.caps.FakeClock {
		ok(t, "AwaitParked", s.h.AwaitParked(s.bounded(t), sub, 1))
	}
	ok(t, "Close", sub.Close())
	select {
	case err := <-done:
		errIs(t, "Poll blocked at Close", err, queue.ErrClosed)
	case <-time.After(hangGuard):
		t.Fatalf("a blocked Poll did not return within %v of Close", hangGuard)
	}
	_, err := sub.Poll(s.bounded(t), 1)
	errIs(t, "Poll after Close", err, queue.ErrClosed)
	for name, err := range map[string]error{
		"Ack":     sub.Ack(held.LeaseID),
		"Nack":    sub.Nack(held.LeaseID, 0),
		"Fail":    sub.Fail(held.LeaseID, errors.New("x")),
		"Extend":  sub.Extend(held.LeaseID, s.vis),
		"Release": sub.Release(held.LeaseID),
	} {
		if err == nil {
			t.Errorf("%s after Close succeeded", name)
		}
	}
	sub.Close() // twice: must not panic
}
