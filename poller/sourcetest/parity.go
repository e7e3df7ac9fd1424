package sourcetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// The optional interfaces of the publish and subscribe options beyond the
// basics: time to live, filters, ordering keys and publish delay. As with
// the other optional interfaces, a case whose interface the harness lacks
// is skipped by name, with the reason.

// TTLPublisher publishes with a time to live: a message still waiting at
// PublishedAt + ttl (or later) is dead-lettered with queue.ReasonExpired
// instead of being delivered; a lease taken before may still be acked. A
// ttl <= 0 is an error.
type TTLPublisher interface {
	PublishTTL(ctx context.Context, topic, payload string, ttl time.Duration) error
}

// FilterSubscriber opens a subscription that receives only the messages of
// its topic for which keep returns true.
type FilterSubscriber interface {
	SubscribeFiltered(ctx context.Context, topic, name string, opts SubscribeOptions, keep func(queue.Message[string]) bool) (Subscription, error)
}

// KeyPublisher publishes with an ordering key: on each subscription the
// messages of one key are delivered in publish order, one at a time (a
// later one is held back while an earlier one is leased or waits out a
// retry delay), while other keys and unkeyed messages flow freely.
type KeyPublisher interface {
	PublishKey(ctx context.Context, topic, payload, key string) error
}

// DelayPublisher publishes a message that becomes visible delay after the
// publish; waiting spends no attempt. A negative delay is an error.
type DelayPublisher interface {
	PublishDelay(ctx context.Context, topic, payload string, delay time.Duration) error
}

// parityCases are the cases of the interfaces above.
func (s *suite) parityCases() []namedCase {
	return []namedCase{
		{"TTL", s.testTTL},
		{"Filter", s.testFilter},
		{"OrderingKeys", s.testOrderingKeys},
		{"PublishDelay", s.testPublishDelay},
	}
}

func (s *suite) testTTL(t *testing.T) {
	tp := need[TTLPublisher](t, s.h, "TTLPublisher", "message time to live")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "ttl", s.opts())
	ttl := 2 * s.unit
	if err := tp.PublishTTL(s.bounded(t), topic, "zero", 0); err == nil {
		t.Fatal("PublishTTL with a zero TTL succeeded")
	}
	ok(t, "PublishTTL", tp.PublishTTL(s.bounded(t), topic, "held", ttl))
	ok(t, "PublishTTL", tp.PublishTTL(s.bounded(t), topic, "expires", ttl))
	s.publish(t, topic, "lives")
	held := s.pollOne(t, sub) // leased before its TTL runs out
	check(t, held, "held", 1)
	s.elapse(t, ttl)
	// "expires" waited past its TTL: it is dead-lettered, not delivered.
	d := s.pollOne(t, sub)
	check(t, d, "lives", 1)
	ok(t, "Ack", sub.Ack(d.LeaseID))
	ok(t, "Ack of a lease taken before the TTL ran out", sub.Ack(held.LeaseID))
	dl := s.deadLetters(t, sub, 1)[0]
	if dl.Payload != "expires" || dl.Reason != queue.ReasonExpired || dl.Attempts != 0 {
		t.Fatalf("dead letter %+v, want expires, reason expired, 0 attempts", dl)
	}
	s.expectNoneAfter(t, sub, s.vis)
}

func (s *suite) testFilter(t *testing.T) {
	fs := need[FilterSubscriber](t, s.h, "FilterSubscriber", "subscription filters")
	topic := s.topic(t)
	keep := func(m queue.Message[string]) bool { return strings.HasPrefix(m.Payload, "keep") }
	sub, err := fs.SubscribeFiltered(s.bounded(t), topic, "filtered", s.opts(), keep)
	ok(t, "SubscribeFiltered", err)
	t.Cleanup(func() { sub.Close() })
	all := s.subscribe(t, topic, "unfiltered", s.opts())
	want := []string{"keep-1", "drop-1", "keep-2", "drop-2"}
	s.publish(t, topic, want...)
	for _, p := range []string{"keep-1", "keep-2"} {
		d := s.pollOne(t, sub)
		check(t, d, p, 1)
		ok(t, "Ack", sub.Ack(d.LeaseID))
	}
	s.expectNone(t, sub, s.unit)
	// The filter is the subscription's: another one gets everything.
	for _, p := range want {
		d := s.pollOne(t, all)
		check(t, d, p, 1)
		ok(t, "Ack", all.Ack(d.LeaseID))
	}
}

func (s *suite) testOrderingKeys(t *testing.T) {
	kp := need[KeyPublisher](t, s.h, "KeyPublisher", "ordering keys")
	topic := s.topic(t)
	o := s.opts()
	sub := s.subscribe(t, topic, "keys", o)
	for _, m := range [][2]string{{"a1", "A"}, {"a2", "A"}, {"b1", "B"}} {
		ok(t, "PublishKey", kp.PublishKey(s.bounded(t), topic, m[0], m[1]))
	}
	s.publish(t, topic, "free")
	// The head of each key and the unkeyed message, in publish order; a2
	// is held back while a1 is leased.
	var got []queue.Delivery[string]
	for len(got) < 3 {
		ds, err := sub.Poll(s.bounded(t), 4)
		ok(t, "Poll(4)", err)
		got = append(got, ds...)
	}
	if len(got) != 3 {
		t.Fatalf("%d deliveries, want 3 (a2 held back)", len(got))
	}
	for i, p := range []string{"a1", "b1", "free"} {
		check(t, got[i], p, 1)
	}
	s.expectNone(t, sub, s.unit)
	// a2 stays held back while a1 waits out its retry delay...
	ok(t, "Fail a1", sub.Fail(got[0].LeaseID, errors.New("boom")))
	delay := o.Retry().Delay(1)
	if s.caps.FakeClock {
		s.elapse(t, delay-time.Nanosecond)
	}
	s.expectNone(t, sub, delay-s.unit)
	if s.caps.FakeClock {
		s.elapse(t, time.Nanosecond)
	}
	// ...and a1 comes back before it.
	a1 := s.pollOne(t, sub)
	check(t, a1, "a1", 2)
	ok(t, "Ack a1", sub.Ack(a1.LeaseID))
	a2 := s.pollOne(t, sub)
	check(t, a2, "a2", 1)
	for _, d := range []queue.Delivery[string]{a2, got[1], got[2]} {
		ok(t, "Ack", sub.Ack(d.LeaseID))
	}
	s.expectNone(t, sub, s.unit)
}

func (s *suite) testPublishDelay(t *testing.T) {
	dp := need[DelayPublisher](t, s.h, "DelayPublisher", "publish delay")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "delay", s.opts())
	if err := dp.PublishDelay(s.bounded(t), topic, "negative", -s.unit); err == nil {
		t.Fatal("PublishDelay with a negative delay succeeded")
	}
	delay := 2 * s.unit
	ok(t, "PublishDelay", dp.PublishDelay(s.bounded(t), topic, "later", delay))
	s.publish(t, topic, "now")
	d := s.pollOne(t, sub)
	check(t, d, "now", 1)
	ok(t, "Ack", sub.Ack(d.LeaseID))
	// Not visible before the delay...
	if s.caps.FakeClock {
		s.elapse(t, delay-time.Nanosecond)
	}
	s.expectNone(t, sub, delay/2)
	if s.caps.FakeClock {
		s.elapse(t, time.Nanosecond)
	}
	// ...visible after it, on its first attempt: waiting spent none.
	d = s.pollOne(t, sub)
	check(t, d, "later", 1)
	ok(t, "Ack", sub.Ack(d.LeaseID))
	s.expectNoneAfter(t, sub, s.vis)
}
