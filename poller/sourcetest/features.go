package sourcetest

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// The interfaces below are optional. A harness implements those its
// backend has; a case that needs one the harness lacks is skipped by
// name, with the reason, like a missing capability.

// BatchPublisher publishes many payloads to a topic in one call, in order.
type BatchPublisher interface {
	PublishBatch(ctx context.Context, topic string, payloads []string) error
}

// DedupPublisher publishes with a deduplication id: a second publish of an
// id within the backend's window stores nothing and returns the original
// message (the suite asks while the original is still queued: a backend
// may answer with less once it is settled).
type DedupPublisher interface {
	PublishDedup(ctx context.Context, topic, payload, dedupID string) (queue.Message[string], error)
}

// TryPoller leases what is visible now, up to n, without waiting.
type TryPoller interface {
	TryPoll(sub Subscription, n int) []queue.Delivery[string]
}

// VisibilityPoller polls with a visibility timeout of the call's own.
type VisibilityPoller interface {
	PollWithVisibility(ctx context.Context, sub Subscription, n int, visibility time.Duration) ([]queue.Delivery[string], error)
}

// Purger drops every message a subscription holds, in flight included,
// and returns how many.
type Purger interface {
	Purge(ctx context.Context, sub Subscription) (int, error)
}

// StatsReader reads a subscription's queue.Stats; the suite checks
// Visible and InFlight only.
type StatsReader interface {
	Stats(ctx context.Context, sub Subscription) (queue.Stats, error)
}

// Redriver puts the dead letters of sub that match back on sub, as fresh
// messages, and returns how many.
type Redriver interface {
	Redrive(ctx context.Context, sub Subscription, match func(DeadLetter) bool) (int, error)
}

// PatternSubscriber is implemented by a harness whose Subscribe takes a
// wildcard pattern over dot-separated topics ("t.*" for one segment, "t.>"
// for one or more) and whose CreateTopic takes dotted topics.
type PatternSubscriber interface {
	// Patterns reports whether the backend delivers by pattern.
	Patterns() bool
}

// featureCases are the cases of the optional interfaces.
func (s *suite) featureCases() []namedCase {
	return []namedCase{
		{"PublishBatch", s.testPublishBatch},
		{"PublishDedup", s.testPublishDedup},
		{"TryPoll", s.testTryPoll},
		{"PollWithVisibility", s.testPollWithVisibility},
		{"Purge", s.testPurge},
		{"Stats", s.testStats},
		{"Redrive", s.testRedrive},
		{"WildcardSubscription", s.testWildcard},
		{"Pause", s.testPause},
		{"Peek", s.testPeek},
	}
}

// need skips t unless the harness implements the interface.
func need[I any](t *testing.T, h Harness, name, what string) I {
	t.Helper()
	i, ok := h.(I)
	if !ok {
		t.Skipf("harness does not implement sourcetest.%s: the backend has no %s", name, what)
	}
	return i
}

func (s *suite) testPublishBatch(t *testing.T) {
	bp := need[BatchPublisher](t, s.h, "BatchPublisher", "batch publish")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "batch-pub", s.opts())
	want := []string{"b0", "b1", "b2", "b3", "b4"}
	ok(t, "PublishBatch", bp.PublishBatch(s.bounded(t), topic, want))
	for _, p := range want {
		d := s.pollOne(t, sub)
		check(t, d, p, 1)
		ok(t, "Ack", sub.Ack(d.LeaseID))
	}
}

func (s *suite) testPublishDedup(t *testing.T) {
	dp := need[DedupPublisher](t, s.h, "DedupPublisher", "publish deduplication")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "dedup", s.opts())
	first, err := dp.PublishDedup(s.bounded(t), topic, "original", "id-1")
	ok(t, "PublishDedup", err)
	again, err := dp.PublishDedup(s.bounded(t), topic, "copy", "id-1")
	ok(t, "PublishDedup of the same id", err)
	if again.ID != first.ID || again.Payload != "original" {
		t.Fatalf("duplicate publish returned %v %q, want the original %v %q", again.ID, again.Payload, first.ID, first.Payload)
	}
	d := s.pollOne(t, sub)
	check(t, d, "original", 1)
	if d.ID != first.ID {
		t.Fatalf("delivered id %v, want %v", d.ID, first.ID)
	}
	ok(t, "Ack", sub.Ack(d.LeaseID))
	s.expectNone(t, sub, s.unit)
}

func (s *suite) testTryPoll(t *testing.T) {
	tp := need[TryPoller](t, s.h, "TryPoller", "non-blocking poll")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "try", s.opts())
	if ds := tp.TryPoll(sub, 3); len(ds) != 0 {
		t.Fatalf("TryPoll with nothing published returned %d deliveries", len(ds))
	}
	s.publish(t, topic, "t0", "t1")
	ds := tp.TryPoll(sub, 3)
	if len(ds) != 2 {
		t.Fatalf("TryPoll(3) with two published returned %d deliveries", len(ds))
	}
	for i, d := range ds {
		check(t, d, []string{"t0", "t1"}[i], 1)
		ok(t, "Ack", sub.Ack(d.LeaseID))
	}
	if ds := tp.TryPoll(sub, 0); len(ds) != 0 {
		t.Fatalf("TryPoll(0) returned %d deliveries", len(ds))
	}
}

func (s *suite) testPollWithVisibility(t *testing.T) {
	vp := need[VisibilityPoller](t, s.h, "VisibilityPoller", "per-poll visibility timeout")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "poll-vis", s.opts())
	s.publish(t, topic, "v")
	short := 2 * s.unit // half the subscription's
	ds, err := vp.PollWithVisibility(s.bounded(t), sub, 1, short)
	ok(t, "PollWithVisibility", err)
	if len(ds) != 1 {
		t.Fatalf("PollWithVisibility returned %d deliveries", len(ds))
	}
	check(t, ds[0], "v", 1)
	// Back after its own timeout, before the subscription's.
	if s.caps.FakeClock {
		s.elapse(t, short)
	}
	start := time.Now()
	d := s.pollOne(t, sub)
	check(t, d, "v", 2)
	if !s.caps.FakeClock && time.Since(start) > s.vis {
		t.Fatalf("redelivered after %v, later than the subscription's timeout %v", time.Since(start), s.vis)
	}
	ok(t, "Ack", sub.Ack(d.LeaseID))
	if _, err := vp.PollWithVisibility(s.bounded(t), sub, 1, 0); err == nil {
		t.Fatal("PollWithVisibility with a zero visibility succeeded")
	}
}

func (s *suite) testPurge(t *testing.T) {
	pg := need[Purger](t, s.h, "Purger", "purge")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "purge", s.opts())
	other := s.subscribe(t, topic, "purge-other", s.opts())
	s.publish(t, topic, "p0", "p1", "p2")
	held := s.pollOne(t, sub)
	n, err := pg.Purge(s.bounded(t), sub)
	ok(t, "Purge", err)
	if n != 3 {
		t.Fatalf("Purge dropped %d, want 3 (one in flight)", n)
	}
	errIs(t, "Ack of a purged lease", sub.Ack(held.LeaseID), queue.ErrLeaseNotFound)
	s.expectNoneAfter(t, sub, s.vis)
	s.publish(t, topic, "after")
	check(t, s.pollOne(t, sub), "after", 1)
	// The other subscription keeps its copies.
	for _, p := range []string{"p0", "p1", "p2", "after"} {
		d := s.pollOne(t, other)
		check(t, d, p, 1)
		ok(t, "Ack", other.Ack(d.LeaseID))
	}
}

func (s *suite) testStats(t *testing.T) {
	sr := need[StatsReader](t, s.h, "StatsReader", "statistics")
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "stats", s.opts())
	s.publish(t, topic, "s0", "s1", "s2")
	d := s.pollOne(t, sub)
	s.statsReach(t, sr, sub, "with 2 waiting and 1 leased", 2, 1)
	ok(t, "Ack", sub.Ack(d.LeaseID))
	s.statsReach(t, sr, sub, "after the Ack", 2, 0)
}

// statsReach waits until sub's Stats say visible and inFlight. A backend
// with a fake clock must say so at once; another's counts may trail what
// it has confirmed by a moment (a server counts asynchronously), so the
// suite reads them again until they agree or the hang guard ends the wait.
func (s *suite) statsReach(t *testing.T, sr StatsReader, sub Subscription, what string, visible, inFlight int) {
	t.Helper()
	ctx := s.bounded(t)
	for {
		st, err := sr.Stats(ctx, sub)
		ok(t, "Stats", err)
		if st.Visible == visible && st.InFlight == inFlight {
			return
		}
		if s.caps.FakeClock || ctx.Err() != nil {
			t.Fatalf("Stats %s: Visible %d InFlight %d, want %d and %d", what, st.Visible, st.InFlight, visible, inFlight)
		}
		runtime.Gosched()
	}
}

func (s *suite) testRedrive(t *testing.T) {
	rd := need[Redriver](t, s.h, "Redriver", "redrive")
	topic := s.topic(t)
	o := s.opts()
	o.MaxAttempts = 1
	sub := s.subscribe(t, topic, "redrive", o)
	other := s.subscribe(t, topic, "redrive-other", s.opts())
	s.publish(t, topic, "keep", "back")
	for range 2 {
		d := s.pollOne(t, sub)
		ok(t, "Fail on the last attempt", sub.Fail(d.LeaseID, errors.New("boom")))
	}
	s.deadLetters(t, sub, 2)
	n, err := rd.Redrive(s.bounded(t), sub, func(dl DeadLetter) bool { return dl.Payload == "back" })
	ok(t, "Redrive", err)
	if n != 1 {
		t.Fatalf("Redrive put back %d, want 1", n)
	}
	d := s.pollOne(t, sub)
	check(t, d, "back", 1) // attempts reset
	ok(t, "Ack", sub.Ack(d.LeaseID))
	if dls := s.deadLetters(t, sub, 1); dls[0].Payload != "keep" {
		t.Fatalf("dead letter left %q, want keep", dls[0].Payload)
	}
	n, err = rd.Redrive(s.bounded(t), sub, func(dl DeadLetter) bool { return dl.Payload == "back" })
	ok(t, "second Redrive", err)
	if n != 0 {
		t.Fatalf("second Redrive put back %d, want 0", n)
	}
	// The other subscription sees each message once: a redrive is for
	// its own subscription alone.
	for _, p := range []string{"keep", "back"} {
		d := s.pollOne(t, other)
		check(t, d, p, 1)
		ok(t, "Ack", other.Ack(d.LeaseID))
	}
	s.expectNone(t, other, s.unit)
}

func (s *suite) testWildcard(t *testing.T) {
	ps, isPS := s.h.(PatternSubscriber)
	if !isPS || !ps.Patterns() {
		t.Skip("harness does not implement sourcetest.PatternSubscriber: the backend has no wildcard subscriptions")
	}
	base := s.topic(t)
	for _, seg := range []string{"a", "b", "b.deep"} {
		ok(t, "CreateTopic", s.h.CreateTopic(s.bounded(t), base+"."+seg))
	}
	star := s.subscribe(t, base+".*", "star", s.opts())
	rest := s.subscribe(t, base+".>", "rest", s.opts())
	for _, seg := range []string{"a", "b", "b.deep"} {
		s.publish(t, base+"."+seg, seg)
	}
	s.publish(t, base, "base") // matched by neither
	for _, c := range []struct {
		sub  Subscription
		want []string
	}{{star, []string{"a", "b"}}, {rest, []string{"a", "b", "b.deep"}}} {
		for _, p := range c.want {
			d := s.pollOne(t, c.sub)
			check(t, d, p, 1)
			if d.Topic != base+"."+p {
				t.Fatalf("delivery of %q has topic %q, want %q", p, d.Topic, base+"."+p)
			}
			ok(t, "Ack", c.sub.Ack(d.LeaseID))
		}
		s.expectNone(t, c.sub, s.unit)
	}
}
