package sourcetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// The pool's own limits, poller.WithRate and poller.SlowDown, over the
// backend: they need nothing of a source but what every source has (a
// backend.DelayReleaser keeps SlowDown's attempt; any other spends it).

// paceCases are the cases of the pool's limits.
func (s *suite) paceCases() []namedCase {
	return []namedCase{
		{"PoolRate", s.testPoolRate},
		{"PoolSlowDown", s.testPoolSlowDown},
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
