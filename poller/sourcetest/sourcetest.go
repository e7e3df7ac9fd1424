package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// hangGuard bounds every wait on a condition, so that a broken backend
// fails a case instead of hanging the test binary. It is never a timing
// assertion.
const hangGuard = 15 * time.Second

// Run runs the conformance suite against h, one subtest per semantic, and
// closes h when the test ends. Each case uses a fresh topic, so the cases
// share one backend without seeing each other's messages.
func Run(t *testing.T, h Harness) {
	t.Helper()
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Harness.Close: %v", err)
		}
	})
	caps := h.Capabilities()
	u := caps.Unit
	if u <= 0 {
		u = time.Second
	}
	s := &suite{h: h, caps: caps, unit: u, vis: 4 * u}
	cases := []struct {
		name string
		f    func(*testing.T)
	}{
		{"PollBatch", s.testPollBatch},
		{"PollInvalidN", s.testPollInvalidN},
		{"PollBlocksUntilPublish", s.testPollBlocks},
		{"PollContextDoneBefore", s.testPollContextDoneBefore},
		{"PollContextEndsWhileWaiting", s.testPollContextEnds},
		{"AckDeletes", s.testAckDeletes},
		{"AckTwice", s.testAckTwice},
		{"AckUnknown", s.testAckUnknown},
		{"NackDelay", s.testNackDelay},
		{"FailBackoff", s.testFailBackoff},
		{"Extend", s.testExtend},
		{"ExtendArbitrary", s.testExtendArbitrary},
		{"ExtendInvalid", s.testExtendInvalid},
		{"AttemptCounts", s.testAttempts},
		{"RedeliveryAfterVisibilityTimeout", s.testRedelivery},
		{"StaleAck", s.testStaleAck},
		{"LateAck", s.testLateAck},
		{"SettleAfterDeadline", s.testSettleAfterDeadline},
		{"Release", s.testRelease},
		{"ReleaseKeepsAttempt", s.testReleaseKeepsAttempt},
		{"MaxAttemptsAfterFail", s.testMaxAttemptsFail},
		{"MaxAttemptsAfterExpiry", s.testMaxAttemptsExpiry},
		{"DeliveryMaxAttempts", s.testDeliveryMaxAttempts},
		{"FanOutIsolation", s.testFanOut},
		{"Priorities", s.testPriorities},
		{"Close", s.testClose},
	}
	cases = append(cases, s.featureCases()...)
	for _, c := range cases {
		t.Run(c.name, c.f)
	}
}

type suite struct {
	h    Harness
	caps Capabilities
	unit time.Duration // base duration
	vis  time.Duration // the visibility timeout of most cases: 4 units
	seq  atomic.Uint64 // names topics
}

// require skips t, saying why, unless the backend has the capability.
func (s *suite) require(t *testing.T, has bool, capability, why string) {
	t.Helper()
	if !has {
		t.Skipf("backend lacks Capabilities.%s: %s", capability, why)
	}
}

// bounded returns a context that ends after the hang guard plus a margin
// for the backend's time unit.
func (s *suite) bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard+20*s.unit)
	t.Cleanup(cancel)
	return ctx
}

// topic creates a fresh topic.
func (s *suite) topic(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("st-%d", s.seq.Add(1))
	if err := s.h.CreateTopic(s.bounded(t), name); err != nil {
		t.Fatalf("CreateTopic(%q): %v", name, err)
	}
	return name
}

// opts returns the default subscription options of the suite: a
// visibility timeout of 4 units, 10 attempts, retries from 2 units.
func (s *suite) opts() SubscribeOptions {
	return SubscribeOptions{VisibilityTimeout: s.vis, MaxAttempts: 10, RetryInitial: 2 * s.unit}
}

// subscribe opens a subscription closed when the test ends.
func (s *suite) subscribe(t *testing.T, topic, name string, o SubscribeOptions) Subscription {
	t.Helper()
	sub, err := s.h.Subscribe(s.bounded(t), topic, name, o)
	if err != nil {
		t.Fatalf("Subscribe(%q, %q): %v", topic, name, err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

func (s *suite) publish(t *testing.T, topic string, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		if err := s.h.Publish(s.bounded(t), topic, p); err != nil {
			t.Fatalf("Publish(%q, %q): %v", topic, p, err)
		}
	}
}

// elapse lets d pass: Advance on a fake clock, else a bounded real-time
// wait (a backend on real time has no other way to let a deadline pass).
func (s *suite) elapse(t *testing.T, d time.Duration) {
	t.Helper()
	if s.caps.FakeClock {
		if err := s.h.Advance(d); err != nil {
			t.Fatalf("Advance(%v): %v", d, err)
		}
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
}

// pollOne polls until one delivery arrives (bounded) and returns it.
func (s *suite) pollOne(t *testing.T, sub Subscription) queue.Delivery[string] {
	t.Helper()
	ds, err := sub.Poll(s.bounded(t), 1)
	if err != nil {
		t.Fatalf("Poll: %v", err)
	}
	if len(ds) != 1 {
		t.Fatalf("Poll(1) returned %d deliveries", len(ds))
	}
	return ds[0]
}

// expectNone checks that nothing is delivered now. On a fake clock a Poll
// parks and is cancelled; on real time a Poll waits for `within`.
func (s *suite) expectNone(t *testing.T, sub Subscription, within time.Duration) {
	t.Helper()
	var (
		ds  []queue.Delivery[string]
		err error
	)
	if s.caps.FakeClock {
		ctx, cancel := context.WithCancel(s.bounded(t))
		type result struct {
			ds  []queue.Delivery[string]
			err error
		}
		done := make(chan result, 1)
		go func() {
			ds, err := sub.Poll(ctx, 1)
			done <- result{ds, err}
		}()
		if err := s.h.AwaitParked(s.bounded(t), sub, 1); err != nil {
			cancel()
			<-done
			t.Fatalf("AwaitParked: %v", err)
		}
		cancel()
		r := <-done
		ds, err = r.ds, r.err
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		ds, err = sub.Poll(ctx, 1)
		cancel()
	}
	if len(ds) > 0 {
		t.Fatalf("expected nothing visible, got %q (attempt %d)", ds[0].Payload, ds[0].Attempt)
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Poll with nothing visible: err = %v, want the context's error", err)
	}
}

// expectNoneAfter lets d pass and checks that nothing is visible.
func (s *suite) expectNoneAfter(t *testing.T, sub Subscription, d time.Duration) {
	t.Helper()
	if s.caps.FakeClock {
		s.elapse(t, d)
		s.expectNone(t, sub, 0)
		return
	}
	s.expectNone(t, sub, d+s.unit)
}

func ok(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func errIs(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want one matching %v", what, err, want)
	}
}

func check(t *testing.T, d queue.Delivery[string], payload string, attempt int) {
	t.Helper()
	if d.Payload != payload || d.Attempt != attempt {
		t.Fatalf("delivery %q attempt %d, want %q attempt %d", d.Payload, d.Attempt, payload, attempt)
	}
	if d.LeaseID.IsZero() {
		t.Fatalf("delivery %q has the zero lease id", d.Payload)
	}
}

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
