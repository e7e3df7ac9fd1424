package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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
	cases := []namedCase{
		{"PollBatch", s.testPollBatch},
		{"PollInvalidN", s.testPollInvalidN},
		{"PollBlocksUntilPublish", s.testPollBlocks},
		{"PollContextDoneBefore", s.testPollContextDoneBefore},
		{"PollContextEndsWhileWaiting", s.testPollContextEnds},
		{"AckDeletes", s.testAckDeletes},
		{"AckTwice", s.testAckTwice},
		{"AckBatch", s.testAckBatch},
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
	cases = append(cases, s.parityCases()...)
	cases = append(cases, s.seamCases()...)
	cases = append(cases, s.paceCases()...)
	for _, name := range unknownCases(s.caps.Differs, cases) {
		t.Errorf("Capabilities.Differs names %q, which is no case of the suite", name)
	}
	for _, c := range cases {
		if why, ok := s.caps.Differs[c.name]; ok {
			t.Run(c.name, func(t *testing.T) { t.Skipf("the backend differs (Capabilities.Differs): %s", why) })
			continue
		}
		t.Run(c.name, c.f)
	}
}

// unknownCases returns the names of differs that are no case's, sorted.
func unknownCases(differs map[string]string, cases []namedCase) []string {
	var out []string
	for name := range differs {
		if !slices.ContainsFunc(cases, func(c namedCase) bool { return c.name == name }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// namedCase is one case of the suite: a subtest's name and its body.
type namedCase struct {
	name string
	f    func(*testing.T)
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
