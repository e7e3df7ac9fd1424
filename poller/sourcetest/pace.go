package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// The pool's own limits, poller.WithRate and poller.SlowDown, and its
// batch handler (poller.NewBatch), over the backend: they need nothing of
// a source but what every source has (a backend.DelayReleaser keeps
// SlowDown's attempt; any other spends it; a backend.Rejecter
// dead-letters a GiveUp at once, any other retries it).

// paceCases are the cases of the pool's limits.
func (s *suite) paceCases() []namedCase {
	return []namedCase{
		{"PoolRate", s.testPoolRate},
		{"PoolSlowDown", s.testPoolSlowDown},
		{"PoolBatchOutcomes", s.testPoolBatchOutcomes},
		{"PoolCancel", s.testPoolCancel},
	}
}

// start is a handler's start: what it got, and when on the pool's clock.
type start struct {
	payload string
	attempt int
	at      time.Time
}

// runPace runs a pool over sub with opts and handler h (which sees each
// start first) until the test ends, and returns it with the starts and
// the pool's events (every outcome).
func (s *suite) runPace(t *testing.T, sub Subscription, h func(start) error, opts ...poller.Option) (*poller.Poller[string], <-chan start, <-chan poller.Event[string]) {
	t.Helper()
	starts := make(chan start, 64)
	events := make(chan poller.Event[string], 64)
	opts = append(opts, poller.WithObserver(func(ev poller.Event[string]) { events <- ev }))
	p, err := poller.New[string](sub, func(_ context.Context, d queue.Delivery[string]) error {
		st := start{payload: d.Payload, attempt: d.Attempt, at: s.now(sub)}
		err := h(st)
		starts <- st
		return err
	}, opts...)
	ok(t, "poller.New", err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		ok(t, "Run", <-ran)
	})
	return p, starts, events
}

// settled waits for the outcome of the delivery of payload.
func (s *suite) settled(t *testing.T, events <-chan poller.Event[string], payload string) poller.Event[string] {
	t.Helper()
	for {
		select {
		case ev := <-events:
			if ev.Delivery.Payload == payload && ev.Outcome != poller.OutcomeExtended && ev.Outcome != poller.OutcomeExtensionStopped {
				return ev
			}
		case <-s.bounded(t).Done():
			t.Fatalf("no outcome for %q", payload)
			return poller.Event[string]{}
		}
	}
}

// next receives the next start, bounded.
func (s *suite) next(t *testing.T, starts <-chan start) start {
	t.Helper()
	select {
	case st := <-starts:
		return st
	case <-s.bounded(t).Done():
		t.Fatal("no handler started")
		return start{}
	}
}

// quietPolled waits for the pool to be at rest and checks how many
// deliveries it has received.
func (s *suite) quietPolled(t *testing.T, p *poller.Poller[string], want uint64, when string) {
	t.Helper()
	ok(t, "AwaitQuiet", p.AwaitQuiet(s.bounded(t)))
	if got := p.Stats().Polled; got != want {
		t.Fatalf("%s: the pool received %d deliveries, want %d", when, got, want)
	}
}

// A pool WithRate(2, 4 units) starts 2 at once, then one every 2 units,
// and leases nothing it may not start.
func (s *suite) testPoolRate(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "pool-rate", s.opts())
	const n = 6
	for i := range n {
		s.publish(t, topic, fmt.Sprint("r", i))
	}
	interval := 2 * s.unit
	before := s.now(sub)
	p, starts, _ := s.runPace(t, sub, func(start) error { return nil }, poller.WithRate(2, 4*s.unit))
	if s.caps.FakeClock {
		for range 2 {
			s.next(t, starts)
		}
		s.quietPolled(t, p, 2, "a full bucket")
		for i := 3; i <= n; i++ {
			s.elapse(t, interval)
			s.next(t, starts)
			s.quietPolled(t, p, uint64(i), fmt.Sprintf("after %d intervals", i-2))
		}
		return
	}
	// On real time: no start comes before its token.
	for i := range n {
		st := s.next(t, starts)
		if early := before.Add(time.Duration(i-1) * interval); i >= 2 && st.at.Before(early) {
			t.Fatalf("start %d at +%v, before its token at +%v", i+1, st.at.Sub(before), early.Sub(before))
		}
	}
}

// A handler's SlowDown(2 units) hands its message back and the pool starts
// nothing for 2 units; on a backend.DelayReleaser the attempt is kept.
func (s *suite) testPoolSlowDown(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "pool-slow", s.opts())
	s.publish(t, topic, "a", "b")
	d := 2 * s.unit
	first := true
	p, starts, events := s.runPace(t, sub, func(st start) error {
		if first {
			first = false
			return poller.SlowDown(d, nil)
		}
		return nil
	})
	slowed := s.next(t, starts)
	// The pause starts when the pool settles the lease: wait for that, not
	// only for the pool to be at rest (a handler about to return counts as
	// at rest), before moving the clock.
	s.settled(t, events, slowed.payload)
	wantAttempt := slowed.attempt + 1
	if _, keeps := sub.(backend.DelayReleaser); keeps {
		wantAttempt = slowed.attempt
	}
	if s.caps.FakeClock {
		if r, remote := sub.(backend.Remote); remote && r.Remote() {
			// Its pool leases ahead (poller.WithMaxOutstanding), so it
			// may hold the other message since before the pause; what
			// counts is that it starts nothing during it (checked below).
			ok(t, "AwaitQuiet", p.AwaitQuiet(s.bounded(t)))
		} else {
			s.quietPolled(t, p, 1, "during the pause")
		}
		s.elapse(t, d)
	}
	again, other := s.next(t, starts), s.next(t, starts)
	if again.payload != slowed.payload {
		again, other = other, again
	}
	if again.payload != slowed.payload || again.attempt != wantAttempt {
		t.Fatalf("after SlowDown: %q on attempt %d, want %q on attempt %d", again.payload, again.attempt, slowed.payload, wantAttempt)
	}
	for _, st := range []start{again, other} {
		if st.at.Before(slowed.at.Add(d)) {
			t.Fatalf("%q started %v after the SlowDown, within its %v", st.payload, st.at.Sub(slowed.at), d)
		}
	}
}

// A batch handler's outcomes settle each message of its batch as a single
// handler's result would: of four messages in one call, two acked, one
// failed (retried, its attempt spent), one given up (dead-lettered on a
// backend.Rejecter, else retried); the failed one comes back, alone, as
// its second attempt.
func (s *suite) testPoolBatchOutcomes(t *testing.T) {
	topic := s.topic(t)
	o := s.opts()
	o.RetryInitial = s.unit
	sub := s.subscribe(t, topic, "pool-batch", o)
	s.publish(t, topic, "a", "b", "c", "d")
	calls := make(chan []queue.Delivery[string], 8)
	events := make(chan poller.Event[string], 64)
	p, err := poller.NewBatch[string](sub, func(_ context.Context, ds []queue.Delivery[string]) ([]error, error) {
		calls <- slices.Clone(ds)
		outs := make([]error, len(ds))
		for i, d := range ds {
			switch d.Payload {
			case "b":
				outs[i] = errors.New("row b refused")
			case "c":
				outs[i] = poller.GiveUp(errors.New("row c malformed"))
			}
		}
		return outs, nil
	}, poller.WithBatchMax(4, s.unit), // the four in one call: a full batch is handed over at once
		poller.WithObserver(func(ev poller.Event[string]) { events <- ev }))
	ok(t, "poller.NewBatch", err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		ok(t, "Run", <-ran)
	})
	var first []queue.Delivery[string]
	select {
	case first = <-calls:
	case <-s.bounded(t).Done():
		t.Fatal("no batch")
	}
	got := make([]string, len(first))
	for i, d := range first {
		got[i] = d.Payload
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("first batch %v, want a, b, c and d", got)
	}
	_, rejects := sub.(backend.Rejecter)
	want := map[string]poller.Outcome{"a": poller.OutcomeAcked, "b": poller.OutcomeRetried, "c": poller.OutcomeRetried, "d": poller.OutcomeAcked}
	if rejects {
		want["c"] = poller.OutcomeDeadLettered
	}
	for range 4 {
		ev := s.settledAny(t, events)
		if w, seen := want[ev.Delivery.Payload]; !seen || ev.Outcome != w || ev.SourceErr != nil {
			t.Fatalf("%s: %v (source err %v), want %v", ev.Delivery.Payload, ev.Outcome, ev.SourceErr, w)
		}
		delete(want, ev.Delivery.Payload)
	}
	if rejects {
		if dl := s.deadLetters(t, sub, 1)[0]; dl.Payload != "c" || !strings.Contains(dl.LastError, "row c malformed") {
			t.Fatalf("dead letter %+v, want c, row c malformed", dl)
		}
	}
	if !rejects {
		return // c comes back too, in an order the backend decides
	}
	// b's retry, after its backoff (and on a fake clock the pool at rest
	// first, so that the move finds the pool waiting).
	if s.caps.FakeClock {
		ok(t, "AwaitQuiet", p.AwaitQuiet(s.bounded(t)))
		s.elapse(t, s.unit)
		ok(t, "AwaitQuiet", p.AwaitQuiet(s.bounded(t)))
		s.elapse(t, s.unit) // the linger: a batch of one is not full
	}
	select {
	case again := <-calls:
		if len(again) != 1 || again[0].Payload != "b" || again[0].Attempt != 2 {
			t.Fatalf("second batch %+v, want b alone, attempt 2", again)
		}
	case <-s.bounded(t).Done():
		t.Fatal("b did not come back")
	}
}

// settledAny waits for the next outcome that settles a delivery.
func (s *suite) settledAny(t *testing.T, events <-chan poller.Event[string]) poller.Event[string] {
	t.Helper()
	for {
		select {
		case ev := <-events:
			if ev.Outcome != poller.OutcomeExtended && ev.Outcome != poller.OutcomeExtensionStopped {
				return ev
			}
		case <-s.bounded(t).Done():
			t.Fatal("no outcome")
			return poller.Event[string]{}
		}
	}
}
