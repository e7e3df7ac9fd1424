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

// The cases of the seam between a worker pool and its source (package
// backend): a subscription that implements backend.PoolPoller or
// backend.PoolIdleAwaiter claims that the pool can tell, exactly, when its
// calls are parked, which makes poller's AwaitQuiet exact over it.

// seamCases are the cases of backend.PoolPoller and backend.PoolIdleAwaiter.
func (s *suite) seamCases() []namedCase {
	return []namedCase{
		{"PoolPollerParks", s.testPoolPollerParks},
		{"PoolPollerHold", s.testPoolPollerHold},
		{"PoolPollerInvalid", s.testPoolPollerInvalid},
		{"PoolIdleAwaiterParks", s.testPoolIdleAwaiterParks},
		{"PoolQuietIsExact", s.testPoolQuietIsExact},
	}
}

// poolPoller returns sub as a backend.PoolPoller, or skips t.
func poolPoller(t *testing.T, sub Subscription) backend.PoolPoller[string] {
	t.Helper()
	pp, ok := sub.(backend.PoolPoller[string])
	if !ok {
		t.Skip("the subscription does not implement backend.PoolPoller: a pool counts its Poll as parked once called, so AwaitQuiet over it is not exact")
	}
	return pp
}

// now returns the time on sub's clock: the one its Config reports, or its
// Clock (backend.Clocked), else the real one.
func (s *suite) now(sub Subscription) time.Time {
	switch c := sub.(type) {
	case interface{ Config() queue.Config }:
		if clk := c.Config().Clock; clk != nil {
			return clk.Now()
		}
	case backend.Clocked:
		return c.Clock().Now()
	}
	return time.Now()
}

// requireExactParking skips t unless the backend marks a Parking exactly.
func (s *suite) requireExactParking(t *testing.T) {
	t.Helper()
	s.require(t, s.caps.ExactParking, "ExactParking", "its Parking reads parked while a request is out, so a pool's AwaitQuiet over it is not exact")
}

// watchedParking is a backend.Parking whose every change is announced.
type watchedParking struct {
	*backend.Parking
	changed chan struct{}
}

func newWatchedParking() watchedParking {
	ch := make(chan struct{}, 1)
	return watchedParking{
		Parking: backend.NewParking(func() {
			select {
			case ch <- struct{}{}:
			default:
			}
		}),
		changed: ch,
	}
}

// awaitParked waits, bounded, until pk reports parked on sub's clock.
func (s *suite) awaitParked(t *testing.T, sub Subscription, pk watchedParking, what string) {
	t.Helper()
	ctx := s.bounded(t)
	for !pk.Parked(s.now(sub)) {
		select {
		case <-pk.changed:
		case <-ctx.Done():
			t.Fatalf("%s never marked its Parking parked", what)
		}
	}
}

func (s *suite) testPoolPollerParks(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "parks", s.opts())
	pp := poolPoller(t, sub)
	s.requireExactParking(t)
	pk := newWatchedParking()
	type result struct {
		ds  []queue.Delivery[string]
		err error
	}
	done := make(chan result, 1)
	go func() {
		ds, _, err := pp.PollFor(s.bounded(t), backend.PollRequest[string]{Max: 5, Parking: pk.Parking})
		done <- result{ds, err}
	}()
	s.awaitParked(t, sub, pk, "a PollFor with nothing visible")
	s.publish(t, topic, "wakes")
	if pk.Parked(s.now(sub)) {
		t.Fatal("the Parking still reads parked after the publish that wakes the PollFor returned")
	}
	r := <-done
	ok(t, "PollFor", r.err)
	if len(r.ds) != 1 {
		t.Fatalf("PollFor returned %d deliveries, want 1", len(r.ds))
	}
	check(t, r.ds[0], "wakes", 1)
	if pk.Parked(s.now(sub)) {
		t.Fatal("the Parking reads parked after PollFor returned")
	}
	ok(t, "Ack", sub.Ack(r.ds[0].LeaseID))
}

func (s *suite) testPoolPollerHold(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "hold", s.opts())
	pp := poolPoller(t, sub)
	s.publish(t, topic, "long", "short")
	hold := 10 * s.vis
	for _, c := range []struct {
		payload string
		hold    time.Duration
	}{{"long", hold}, {"short", s.vis / 2}} {
		before := s.now(sub)
		ds, held, err := pp.PollFor(s.bounded(t), backend.PollRequest[string]{Max: 1, Hold: c.hold})
		after := s.now(sub)
		ok(t, "PollFor", err)
		if len(ds) != 1 {
			t.Fatalf("PollFor returned %d deliveries, want 1", len(ds))
		}
		check(t, ds[0], c.payload, 1)
		want := s.vis
		if held {
			want = c.hold
		}
		if c.hold <= s.vis && held {
			t.Fatalf("PollFor with Hold %v, shorter than the visibility timeout %v, reports held", c.hold, s.vis)
		}
		if d := ds[0].Deadline; d.Before(before.Add(want)) || d.After(after.Add(want)) {
			t.Fatalf("Hold %v (held %v): deadline %v after the call, want %v", c.hold, held, d.Sub(before), want)
		}
		ok(t, "Ack", sub.Ack(ds[0].LeaseID))
	}
}

func (s *suite) testPoolPollerInvalid(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "invalid", s.opts())
	pp := poolPoller(t, sub)
	for _, req := range []backend.PollRequest[string]{{Max: 0}, {Max: -1}, {Max: 1, Hold: -time.Second}} {
		_, _, err := pp.PollFor(s.bounded(t), req)
		errIs(t, fmt.Sprintf("PollFor(%+v)", req), err, queue.ErrInvalidArgument)
	}
}

func (s *suite) testPoolIdleAwaiterParks(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "idle", s.opts())
	ia, isIA := sub.(backend.PoolIdleAwaiter)
	if !isIA {
		t.Skip("the subscription does not implement backend.PoolIdleAwaiter: RunUntilIdle counts its wait for idle as parked once begun")
	}
	s.requireExactParking(t)
	s.publish(t, topic, "busy")
	d := s.pollOne(t, sub)
	pk := newWatchedParking()
	done := make(chan error, 1)
	go func() { done <- ia.AwaitIdleFor(s.bounded(t), pk.Parking) }()
	s.awaitParked(t, sub, pk, "an AwaitIdleFor with a message in flight")
	ok(t, "Ack", sub.Ack(d.LeaseID))
	if pk.Parked(s.now(sub)) {
		t.Fatal("the Parking still reads parked after the Ack that made the subscription idle returned")
	}
	ok(t, "AwaitIdleFor", <-done)
}

// A pool over a PoolPoller is at rest only once a message published while
// it polled is with a worker.
func (s *suite) testPoolQuietIsExact(t *testing.T) {
	topic := s.topic(t)
	sub := s.subscribe(t, topic, "quiet", s.opts())
	poolPoller(t, sub)
	s.requireExactParking(t)
	release := make(chan struct{})
	p, err := poller.New[string](sub, func(ctx context.Context, _ queue.Delivery[string]) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	ok(t, "poller.New", err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	defer func() {
		close(release)
		cancel()
		ok(t, "Run", <-ran)
	}()
	ok(t, "AwaitQuiet", p.AwaitQuiet(s.bounded(t)))
	s.publish(t, topic, "work")
	ok(t, "AwaitQuiet", p.AwaitQuiet(s.bounded(t)))
	if st := p.Stats(); st.Running != 1 {
		t.Fatalf("after a publish and AwaitQuiet: %v, want the message running", st)
	}
}
