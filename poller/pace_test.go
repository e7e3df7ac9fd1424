package poller_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

func ack(context.Context, queue.Delivery[string]) error { return nil }

// acked waits for n acks.
func (e *events[T]) acked(t *testing.T, n int) []poller.Event[T] {
	t.Helper()
	evs := make([]poller.Event[T], n)
	for i := range evs {
		evs[i] = e.next(t, poller.OutcomeAcked)
	}
	return evs
}

// A pool with WithRate(5, time.Second) handles 5 at once, then 5 more a
// second of mock time, and holds no lease while it waits for a token.
func TestWithRateSchedule(t *testing.T) {
	for round := range stressRounds() / 10 {
		mock, b, sub := newBroker(t)
		for i := range 30 {
			publish(t, b, fmt.Sprint(i))
		}
		ev := newEvents[string]()
		p, err := poller.New(sub, ack, poller.WithRate(5, time.Second), poller.WithWorkers(4), ev.option())
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, p)
		seen := 0
		check := func(step string, delivered int) {
			t.Helper()
			ev.acked(t, delivered-seen)
			seen = delivered
			awaitQuiet(t, p)
			st := sub.Stats()
			if st.Delivered != uint64(delivered) || st.InFlight != 0 {
				t.Fatalf("round %d, %s: %v, want %d delivered and no lease held", round, step, st, delivered)
			}
			ev.none(t)
		}
		check("a full bucket", 5)
		mock.Add(199 * time.Millisecond)
		check("short of a token", 5)
		mock.Add(time.Millisecond)
		check("one token every 200ms", 6)
		// A token at a time (see WithRate): one Add of a whole second
		// fires the pool's wake-up on its way, and the wait it then arms
		// can miss the rest of that Add.
		for i := range 15 {
			mock.Add(200 * time.Millisecond)
			check(fmt.Sprintf("token %d after the first second", i+1), 7+i)
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
}

var errTooMany = errors.New("429 Too Many Requests")

// SlowDown hands the message back with its attempt kept, visible after d,
// and the pool starts nothing for exactly d.
func TestSlowDown(t *testing.T) {
	for round := range stressRounds() / 10 {
		mock, b, sub := newBroker(t)
		publish(t, b, "a", "b")
		ev := newEvents[string]()
		first := true
		p, err := poller.New(sub, func(_ context.Context, d queue.Delivery[string]) error {
			if first {
				first = false
				return poller.SlowDown(10*time.Second, fmt.Errorf("partner: %w", errTooMany))
			}
			return nil
		}, ev.option())
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, p)
		slowed := ev.next(t, poller.OutcomeReleased)
		if slowed.Delivery.Payload != "a" || !errors.Is(slowed.Err, errTooMany) {
			t.Fatalf("round %d: %q released with %v, want a, with the handler's error", round, slowed.Delivery.Payload, slowed.Err)
		}
		awaitQuiet(t, p)
		if st := sub.Stats(); st.Delivered != 1 || st.Delayed != 1 || st.Visible != 1 || st.InFlight != 0 {
			t.Fatalf("round %d: %v, want a delayed, b visible and untouched", round, st)
		}
		mock.Add(9 * time.Second)
		awaitQuiet(t, p)
		if st := sub.Stats(); st.Delivered != 1 {
			t.Fatalf("round %d: %v, want nothing started before 10s", round, st)
		}
		ev.none(t)
		mock.Add(time.Second)
		evs := ev.acked(t, 2)
		if evs[0].Delivery.Payload != "a" || evs[0].Delivery.Attempt != 1 || evs[1].Delivery.Payload != "b" {
			t.Fatalf("round %d: acked %q (attempt %d) then %q, want a on attempt 1, then b", round,
				evs[0].Delivery.Payload, evs[0].Delivery.Attempt, evs[1].Delivery.Payload)
		}
		if st := p.Stats(); st.Released != 1 || st.Acked != 2 {
			t.Fatalf("round %d: %v, want one release and two acks", round, st)
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
}

// Over a source that cannot release with a delay, SlowDown nacks: the
// attempt is spent, and the pool still pauses.
func TestSlowDownWithoutDelayReleaser(t *testing.T) {
	mock, b, sub := newBroker(t)
	publish(t, b, "a")
	ev := newEvents[string]()
	first := true
	p, err := poller.New[string](remote{sub}, func(_ context.Context, d queue.Delivery[string]) error {
		if first {
			first = false
			return poller.SlowDown(time.Second, nil)
		}
		return nil
	}, poller.WithClock(mock), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	retried := ev.next(t, poller.OutcomeRetried)
	if retried.Err.Error() != "slow down for 1s" {
		t.Fatalf("Err %q, want \"slow down for 1s\"", retried.Err)
	}
	awaitQuiet(t, p)
	mock.Add(time.Second)
	if d := ev.next(t, poller.OutcomeAcked).Delivery; d.Attempt != 2 {
		t.Fatalf("attempt %d, want 2: a Nack spends it", d.Attempt)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestWithRateRefusesBadInput(t *testing.T) {
	_, _, sub := newBroker(t)
	for _, c := range []struct {
		n   int
		per time.Duration
	}{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, -time.Second}, {10, 9}} {
		if _, err := poller.New(sub, ack, poller.WithRate(c.n, c.per)); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("WithRate(%d, %v): %v, want ErrInvalidArgument", c.n, c.per, err)
		}
	}
}

// A pace whose times pass what a time.Duration or Unix nanoseconds hold
// is still a pace: WithRate(1, 150 years) starts one handler, and
// SlowDown(250 years) pauses the pool, however far the clock moves.
func TestPaceFarDurations(t *testing.T) {
	year := 365 * 24 * time.Hour
	mock, b, sub := newBroker(t)
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // 250 years on is past 2262, where Unix nanoseconds end
	publish(t, b, "a", "b", "c")
	ev := newEvents[string]()
	p, err := poller.New(sub, ack, poller.WithRate(1, 150*year), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	ev.acked(t, 1)
	awaitQuiet(t, p)
	mock.Add(24 * time.Hour)
	awaitQuiet(t, p)
	ev.none(t)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	slowed := false
	p, err = poller.New(sub, func(context.Context, queue.Delivery[string]) error {
		if !slowed {
			slowed = true
			return poller.SlowDown(250*year, errTooMany)
		}
		return nil
	}, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r = start(t, p)
	ev.next(t, poller.OutcomeReleased)
	awaitQuiet(t, p)
	mock.Add(24 * time.Hour)
	awaitQuiet(t, p)
	ev.none(t)
	if st := sub.Stats(); st.Delivered != 2 {
		t.Fatalf("%v: want nothing started after the SlowDown", st)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	b.Close()
}
