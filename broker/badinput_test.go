package broker_test

// The bad-input table: every exported function and method of the broker
// and its subscriptions, called with invalid input (the queue core, lease
// IDs and queue's own types have theirs beside them). Each must return its documented
// error (matched with errors.Is), must not panic, and must leave the state
// as it was (Stats, dead letters and topics compared before and after).
// This file holds the fixture, the helpers and the broker's own calls;
// badinput_subscription_test.go holds the subscriptions'.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/internal/testkit"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// badFixture is a broker on a mock clock in a known state: on topic "t",
// subscription "s" holds m1 in flight under lease cur (its first lease,
// old, was superseded by expiry and redelivery), m4 nacked with a delay
// (its lease settled is no longer current) and m5 delayed; m2 was acked
// (lease acked) and m3 rejected into the dead letters (lease dead).
// Subscription "other" on "t" holds a lease of its own (foreign to "s").
type badFixture struct {
	b     *broker.Broker[string]
	mock  *clock.Mock
	s     *broker.Subscription[string]
	other *broker.Subscription[string]

	cur, old, acked, dead, settled, foreign lease.ID
}

func newBadFixture(t *testing.T) *badFixture {
	t.Helper()
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	f := &badFixture{b: b, mock: mock}
	f.s = brokertest.Subscribe(t, b, "t", "s", broker.WithMaxAttempts(3))
	f.other = brokertest.Subscribe(t, b, "t", "other")
	brokertest.Publish(t, b, "t", "m1", "m2", "m3", "m4")
	if _, err := b.Publish(ctx, "t", "m5", broker.WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	one := func() lease.ID {
		t.Helper()
		ds := f.s.TryPoll(1)
		if len(ds) != 1 {
			t.Fatalf("fixture: nothing to poll: %+v", f.s.Stats())
		}
		return ds[0].LeaseID
	}
	f.old = one() // m1
	mock.Add(vis)
	f.cur = one() // m1 again
	f.acked = one()
	must(t, f.s.Ack(f.acked))
	f.dead = one()
	must(t, f.s.Reject(f.dead, errors.New("poison")))
	f.settled = one()
	must(t, f.s.Nack(f.settled, time.Hour))
	f.foreign = f.other.TryPoll(1)[0].LeaseID
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// badState is what a bad call must not change.
type badState struct {
	s, other queue.Stats
	dead     int
	topics   []string
}

// state reads it. The age of the oldest visible message is left out: it
// grows with the clock that some cases move, whatever the call does.
func (f *badFixture) state() badState {
	s, other := f.s.Stats(), f.other.Stats()
	s.OldestVisibleAge, other.OldestVisibleAge = 0, 0
	return badState{s: s, other: other, dead: len(f.b.DeadLetters()), topics: f.b.Topics()}
}

type badCase struct {
	name string
	want error // nil: must succeed (a no-op)
	fn   func(f *badFixture) error
}

func TestBadInputBroker(t *testing.T) {
	long := strings.Repeat("x", 256)
	cases := []badCase{
		// topics
		{"CreateTopic(\"\")", queue.ErrInvalidArgument, func(f *badFixture) error { return f.b.CreateTopic("") }},
		{"CreateTopic(256 bytes)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.b.CreateTopic(long) }},
		{"CreateTopic(invalid UTF-8)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.b.CreateTopic("a\xffb") }},
		{"CreateTopic(NUL)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.b.CreateTopic("a\x00b") }},
		{"CreateTopic(zero-width space)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.b.CreateTopic("a\u200bb") }},
		{"CreateTopic(newline)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.b.CreateTopic("a\nb") }},
		{"CreateTopic(pattern)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.b.CreateTopic("a.*") }},
		{"CreateTopic(empty segment)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.b.CreateTopic("a..b") }},
		{"CreateTopic(existing)", nil, func(f *badFixture) error { return f.b.CreateTopic("t") }},
		{"DeleteTopic(missing)", broker.ErrTopicNotFound, func(f *badFixture) error { return f.b.DeleteTopic("missing") }},
		{"DeleteTopic(\"\")", queue.ErrInvalidArgument, func(f *badFixture) error { return f.b.DeleteTopic("") }},
		{"DeleteTopic(pattern)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.b.DeleteTopic("t.*") }},
		{"Subscriptions(missing)", broker.ErrTopicNotFound, func(f *badFixture) error { _, err := f.b.Subscriptions("missing"); return err }},
		// subscribe
		{"Subscribe(missing topic)", broker.ErrTopicNotFound, func(f *badFixture) error { _, err := f.b.Subscribe("missing", "x"); return err }},
		{"Subscribe(\"\" topic)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Subscribe("", "x"); return err }},
		{"Subscribe(\"\" name)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Subscribe("t", ""); return err }},
		{"Subscribe(name with space)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Subscribe("t", "a b"); return err }},
		{"Subscribe(256-byte name)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Subscribe("t", long); return err }},
		{"Subscribe(invalid UTF-8 name)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Subscribe("t", "\xff"); return err }},
		{"Subscribe(again)", broker.ErrAlreadySubscribed, func(f *badFixture) error { _, err := f.b.Subscribe("t", "s"); return err }},
		{"Subscribe(zero option)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Subscribe("t", "x", broker.SubscribeOption{}); return err }},
		{"Subscribe(bad pattern **)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Subscribe("t.**", "x"); return err }},
		{"Subscribe(bad pattern >.x)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Subscribe("t.>.x", "x"); return err }},
		{"Subscribe(bad pattern a*)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Subscribe("t.a*", "x"); return err }},
		{"Subscribe(bad pattern ..)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Subscribe("t..*", "x"); return err }},
		{"Subscription(missing topic)", broker.ErrTopicNotFound, func(f *badFixture) error { _, err := f.b.Subscription("missing", "s"); return err }},
		{"Subscription(missing name)", broker.ErrSubscriptionNotFound, func(f *badFixture) error { _, err := f.b.Subscription("t", "nope"); return err }},
		{"Subscription(missing pattern)", broker.ErrSubscriptionNotFound, func(f *badFixture) error { _, err := f.b.Subscription("t.*", "nope"); return err }},
		{"Unsubscribe(missing topic)", broker.ErrTopicNotFound, func(f *badFixture) error { return f.b.Unsubscribe("missing", "s") }},
		{"Unsubscribe(missing name)", broker.ErrSubscriptionNotFound, func(f *badFixture) error { return f.b.Unsubscribe("t", "nope") }},
		{"Unsubscribe(missing pattern)", broker.ErrSubscriptionNotFound, func(f *badFixture) error { return f.b.Unsubscribe("t.>", "nope") }},
		// publish
		{"Publish(nil ctx)", queue.ErrInvalidArgument, func(f *badFixture) error {
			//lint:ignore SA1012 a nil context is the invalid input under test
			_, err := f.b.Publish(nil, "t", "x")
			return err
		}},
		{"Publish(missing topic)", broker.ErrTopicNotFound, func(f *badFixture) error { _, err := f.b.Publish(ctx, "missing", "x"); return err }},
		{"Publish(\"\" topic)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Publish(ctx, "", "x"); return err }},
		{"Publish(pattern)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Publish(ctx, "t.*", "x"); return err }},
		{"Publish(PublishOption{})", queue.ErrInvalidArgument, func(f *badFixture) error {
			_, err := f.b.Publish(ctx, "t", "x", broker.PublishOption{})
			return err
		}},
		{"Publish(WithPriority(3))", queue.ErrInvalidArgument, func(f *badFixture) error {
			_, err := f.b.Publish(ctx, "t", "x", broker.WithPriority(3))
			return err
		}},
		{"Publish(WithPriority(MinInt8))", queue.ErrInvalidArgument, func(f *badFixture) error {
			_, err := f.b.Publish(ctx, "t", "x", broker.WithPriority(math.MinInt8))
			return err
		}},
		{"Publish(WithDelay(-1))", queue.ErrInvalidArgument, func(f *badFixture) error {
			_, err := f.b.Publish(ctx, "t", "x", broker.WithDelay(-1))
			return err
		}},
		{"Publish(WithDelay(MinInt64))", queue.ErrInvalidArgument, func(f *badFixture) error {
			_, err := f.b.Publish(ctx, "t", "x", broker.WithDelay(math.MinInt64))
			return err
		}},
		{"Publish(WithTTL(0))", queue.ErrInvalidArgument, func(f *badFixture) error {
			_, err := f.b.Publish(ctx, "t", "x", broker.WithTTL(0))
			return err
		}},
		{"Publish(WithTTL(-1))", queue.ErrInvalidArgument, func(f *badFixture) error {
			_, err := f.b.Publish(ctx, "t", "x", broker.WithTTL(-1))
			return err
		}},
		{"Publish(WithDedupID(\"\"))", queue.ErrInvalidArgument, func(f *badFixture) error {
			_, err := f.b.Publish(ctx, "t", "x", broker.WithDedupID(""))
			return err
		}},
		{"Publish(good options, then a zero one)", queue.ErrInvalidArgument, func(f *badFixture) error {
			_, err := f.b.Publish(ctx, "t", "x", broker.WithPriority(queue.PriorityHigh), broker.WithKey("k"), broker.PublishOption{})
			return err
		}},
		// redrive
		{"Redrive(nil)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Redrive(nil); return err }},
		{"Redrive(matching nothing)", nil, func(f *badFixture) error {
			n, err := f.b.Redrive(func(queue.DeadLetter[string]) bool { return false })
			if n != 0 {
				return fmt.Errorf("redrove %d", n)
			}
			return err
		}},
		{"DeadLetterStats", nil, func(f *badFixture) error {
			if st := f.b.DeadLetterStats(); st.Dropped != 0 || st.Discarded != 0 {
				return fmt.Errorf("DeadLetterStats() = %+v", st)
			}
			return nil
		}},
	}
	runBadCases(t, cases)
}

func TestBadInputBrokerOptions(t *testing.T) {
	var badRetries = []queue.RetryPolicy{
		{Initial: -1}, {Max: -1}, {Multiplier: 0.5}, {Multiplier: math.Inf(1)}, {Multiplier: math.NaN()},
		{Jitter: -0.1}, {Jitter: 1.1}, {Jitter: math.NaN()}, {Initial: time.Minute, Max: time.Second},
	}
	opts := map[string]broker.Option{
		"Option{}":                 {},
		"WithClock(nil)":           broker.WithClock(nil),
		"WithDeadLetterLimit(0)":   broker.WithDeadLetterLimit(0),
		"WithDeadLetterLimit(Min)": broker.WithDeadLetterLimit(math.MinInt),
		"WithDedupWindow(0)":       broker.WithDedupWindow(0),
		"WithDedupWindow(-1)":      broker.WithDedupWindow(-1),
		"WithDedupLimit(0)":        broker.WithDedupLimit(0),
		"WithDedupLimit(-1)":       broker.WithDedupLimit(-1),
	}
	subOpts := map[string]broker.SubscribeOption{
		"SubscribeOption{}":          {},
		"WithVisibilityTimeout(0)":   broker.WithVisibilityTimeout(0),
		"WithVisibilityTimeout(Min)": broker.WithVisibilityTimeout(math.MinInt64),
		"WithMaxAttempts(0)":         broker.WithMaxAttempts(0),
		"WithMaxAttempts(-2)":        broker.WithMaxAttempts(-2),
		"WithMaxAttempts(Min)":       broker.WithMaxAttempts(math.MinInt),
		"WithMaxQueue(0)":            broker.WithMaxQueue(0),
		"WithMaxQueue(Min)":          broker.WithMaxQueue(math.MinInt),
		"WithOverflow(4)":            broker.WithOverflow(4),
		"WithOverflow(255)":          broker.WithOverflow(255),
		"WithMaxInFlight(0)":         broker.WithMaxInFlight(0),
		"WithMaxInFlight(-1)":        broker.WithMaxInFlight(-1),
		"WithDefaultTTL(0)":          broker.WithDefaultTTL(0),
		"WithDefaultTTL(-1)":         broker.WithDefaultTTL(-1),
		"WithDeadLetterTopic(\"\")":  broker.WithDeadLetterTopic(""),
		"WithDeadLetterTopic(a b)":   broker.WithDeadLetterTopic("a b"),
		"WithDeadLetterTopic(t.*)":   broker.WithDeadLetterTopic("t.*"),
		"WithFilter[int](nil)":       broker.WithFilter[int](nil),
		"WithFilter[string] for int": broker.WithFilter(func(queue.Message[string]) bool { return true }),
	}
	for i, r := range badRetries {
		subOpts[fmt.Sprintf("WithRetry(%d: %+v)", i, r)] = broker.WithRetry(r)
	}
	b, _ := brokertest.New[int](t)
	brokertest.Subscribe(t, b, "t", "s")
	before := b.Topics()
	for name, o := range opts {
		err := testkit.CallSafely(func() error { _, err := broker.New[int](o); return err })
		testkit.WantErr(t, "New("+name+")", err, queue.ErrInvalidArgument)
	}
	// A subscribe option, refused by Subscribe and as a default of New.
	for name, so := range subOpts {
		err := testkit.CallSafely(func() error { _, err := broker.New[int](broker.WithSubscriptionDefaults(so)); return err })
		testkit.WantErr(t, "New(WithSubscriptionDefaults("+name+"))", err, queue.ErrInvalidArgument)
		err = testkit.CallSafely(func() error { _, err := b.Subscribe("t", "x", so); return err })
		testkit.WantErr(t, "Subscribe(t, x, "+name+")", err, queue.ErrInvalidArgument)
	}
	if subs, err := b.Subscriptions("t"); err != nil || !slices.Equal(subs, []string{"s"}) || !slices.Equal(b.Topics(), before) {
		t.Errorf("a refused Subscribe left subscriptions %v (%v), topics %v", subs, err, b.Topics())
	}
	// Extremes that are valid must work, not panic.
	for name, o := range map[string]broker.Option{
		"WithMaxQueue(MaxInt)":               broker.WithSubscriptionDefaults(broker.WithMaxQueue(math.MaxInt)),
		"WithMaxInFlight(MaxInt)":            broker.WithSubscriptionDefaults(broker.WithMaxInFlight(math.MaxInt)),
		"WithMaxAttempts(MaxInt)":            broker.WithSubscriptionDefaults(broker.WithMaxAttempts(math.MaxInt)),
		"WithVisibilityTimeout(MaxInt64)":    broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(math.MaxInt64)),
		"WithDeadLetterLimit(MaxInt)":        broker.WithDeadLetterLimit(math.MaxInt),
		"WithDedupLimit(MaxInt)":             broker.WithDedupLimit(math.MaxInt),
		"WithMaxAttempts(UnlimitedAttempts)": broker.WithSubscriptionDefaults(broker.WithMaxAttempts(queue.UnlimitedAttempts)),
	} {
		err := testkit.CallSafely(func() error {
			b, mock := brokertest.New[int](t, o)
			s := brokertest.Subscribe(t, b, "t", "s")
			brokertest.Publish(t, b, "t", 1, 2)
			ds := s.TryPoll(math.MaxInt)
			if len(ds) != 2 {
				return fmt.Errorf("TryPoll(MaxInt) = %d deliveries", len(ds))
			}
			mock.Add(time.Hour)
			return s.Ack(ds[0].LeaseID)
		})
		testkit.WantErr(t, name, err, nil)
	}
}

func runBadCases(t *testing.T, cases []badCase) {
	t.Helper()
	for _, c := range cases {
		checkBadCase(t, newBadFixture(t), c)
	}
}

func checkBadCase(t *testing.T, f *badFixture, c badCase) {
	t.Helper()
	before := f.state()
	err := testkit.CallSafely(func() error { return c.fn(f) })
	testkit.WantErr(t, c.name, err, c.want)
	after := f.state()
	if strings.HasSuffix(c.name, "at its deadline") { // the clock moved: both leases came back, nothing else
		before.s.InFlight--
		before.s.Visible++
		before.other.InFlight--
		before.other.Visible++
	}
	if before.s != after.s || before.other != after.other || before.dead != after.dead || !slices.Equal(before.topics, after.topics) {
		t.Errorf("%s changed the state:\n before %+v\n after  %+v", c.name, before, after)
	}
}

// knownBugRoot fails naming a bug the suite found (and that was fixed):
// the check stays as its regression test.
func knownBugRoot(t *testing.T, bug, format string, args ...any) {
	t.Helper()
	t.Fatalf("BUG %s: %s", bug, fmt.Sprintf(format, args...))
}
