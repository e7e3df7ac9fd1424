package poller_test

// Automatic lease extension: a slow handler's lease, and prefetched ones,
// are extended before they expire on a remote source, and held for the
// whole allowance on a local one.

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// remote shows the poller nothing of a subscription but its Source
// methods, as a remote backend would: it is no backend.PoolPoller, so the
// poller extends its leases on timers instead of holding them (see the
// package doc), and counts a Poll as parked once called.
type remote struct{ poller.Source[string] }

func TestExtensionKeepsSlowHandlerLeaseAlive(t *testing.T) {
	mock, b, sub := newBroker(t) // visibility timeout 10s
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	// The default margin for a 10s lease is 2s; extend for at most 60s.
	p, err := poller.New(remote{sub}, blockingHandler(calls), poller.WithClock(mock), poller.WithExtension(0, time.Minute), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "slow")
	c := recv(t, calls)
	if c.d.Attempt != 1 {
		t.Fatalf("first delivery: Attempt %d", c.d.Attempt)
	}

	// Extend at deadline - 2s, by 10s each time, never past 60s after receipt.
	extensions := map[int]int{8: 18, 16: 26, 24: 34, 32: 42, 40: 50, 48: 58, 56: 60} // when: new deadline
	for sec := 1; sec < 60; sec++ {
		mock.Add(time.Second)
		if to, ok := extensions[sec]; ok {
			e := ev.next(t, poller.OutcomeExtended)
			if want := epoch.Add(time.Duration(to) * time.Second); !e.Delivery.Deadline.Equal(want) {
				t.Fatalf("at %ds: extended to %v, want %v", sec, e.Delivery.Deadline.Sub(epoch), want.Sub(epoch))
			}
		}
		if sec == 58 { // the next extension would pass the limit
			e := ev.next(t, poller.OutcomeExtensionStopped)
			if !errors.Is(e.Err, poller.ErrExtensionLimit) || e.SourceErr != nil {
				t.Fatalf("extension stopped with %v / %v, want ErrExtensionLimit", e.Err, e.SourceErr)
			}
		}
		if st := sub.Stats(); st.InFlight != 1 || st.Visible != 0 || st.Redelivered != 0 {
			t.Fatalf("at %ds, several visibility timeouts in: %+v, want the message in flight, not redelivered", sec, st)
		}
	}
	ev.none(t)
	if st := p.Stats(); st.Extended != 7 || st.InFlight != 1 || st.Running != 1 {
		t.Fatalf("poller stats %+v, want 7 extensions and the message held", st)
	}

	// At 60s the lease lapses: another consumer gets the message, attempt 2.
	mock.Add(time.Second)
	if st := sub.Stats(); st.InFlight != 0 || st.Visible != 1 {
		t.Fatalf("after the limit: %+v, want the message visible again", st)
	}
	ds := sub.TryPoll(1)
	if len(ds) != 1 || ds[0].Attempt != 2 || ds[0].ID != c.d.ID {
		t.Fatalf("redelivery: %+v, want the message with Attempt 2", ds)
	}

	// The stuck handler returns at last: its Ack changes nothing.
	c.done <- nil
	e := ev.next(t, poller.OutcomeSettleFailed)
	if !errors.Is(e.SourceErr, queue.ErrLeaseExpired) || e.Err != nil {
		t.Fatalf("late Ack: %v (handler %v), want ErrLeaseExpired of a handler that succeeded", e.SourceErr, e.Err)
	}
	if err := sub.Ack(ds[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := p.Stats(); st.Acked != 0 || st.Errors != 1 || st.Extended != 7 || st.InFlight != 0 || st.Running != 0 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestPrefetchedLeasesAreExtended(t *testing.T) {
	mock, b, sub := newBroker(t)
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(remote{sub}, blockingHandler(calls), poller.WithClock(mock), poller.WithMaxOutstanding(2), poller.WithBatch(2), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "b")
	r := start(t, p)
	c := recv(t, calls)
	if c.d.Payload != "a" {
		t.Fatalf("first call: %q", c.d.Payload)
	}
	awaitQuiet(t, p)          // the extension timer is set before the clock moves
	mock.Add(8 * time.Second) // both leases are due: the running one and the waiting one
	got := []string{ev.next(t, poller.OutcomeExtended).Delivery.Payload, ev.next(t, poller.OutcomeExtended).Delivery.Payload}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("extended %v, want a and b", got)
	}
	mock.Add(4 * time.Second) // past the first deadline
	if st := sub.Stats(); st.InFlight != 2 || st.Redelivered != 0 {
		t.Fatalf("sub stats %+v", st)
	}
	c.done <- nil
	ev.next(t, poller.OutcomeAcked)
	c = recv(t, calls)
	if c.d.Payload != "b" || c.d.Attempt != 1 {
		t.Fatalf("second call: %q attempt %d", c.d.Payload, c.d.Attempt)
	}
	c.done <- nil
	ev.next(t, poller.OutcomeAcked)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := sub.Stats(); st.Acked != 2 || st.Redelivered != 0 {
		t.Fatalf("sub stats %+v", st)
	}
}

// A local source's lease is taken for the whole allowance: the handler
// sees that deadline, nothing is extended, and the lease holds through any
// jump of the clock short of the limit. At the limit the observer hears
// that it lapses, and the message goes to another consumer.
func TestLocalLeaseIsHeldToTheLimit(t *testing.T) {
	mock, b, sub := newBroker(t) // visibility timeout 10s
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithExtension(0, time.Minute), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "slow")
	c := recv(t, calls)
	if want := epoch.Add(time.Minute); !c.d.Deadline.Equal(want) {
		t.Fatalf("the handler's lease ends at %v, want %v (the limit)", c.d.Deadline.Sub(epoch), want.Sub(epoch))
	}
	mock.Add(time.Minute - time.Nanosecond) // one jump, six visibility timeouts
	if st := sub.Stats(); st.InFlight != 1 || st.Visible != 0 || st.Redelivered != 0 {
		t.Fatalf("just before the limit: %+v, want the message in flight, not redelivered", st)
	}
	ev.none(t)

	mock.Add(time.Nanosecond) // the limit: the lease lapses
	e := ev.next(t, poller.OutcomeExtensionStopped)
	if !errors.Is(e.Err, poller.ErrExtensionLimit) || e.SourceErr != nil || !e.Delivery.Deadline.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("extension stopped: %v / %v at %v, want ErrExtensionLimit at the limit", e.Err, e.SourceErr, e.Delivery.Deadline.Sub(epoch))
	}
	ds := sub.TryPoll(1)
	if len(ds) != 1 || ds[0].Attempt != 2 || ds[0].ID != c.d.ID {
		t.Fatalf("redelivery: %+v, want the message with Attempt 2", ds)
	}
	c.done <- nil
	if e := ev.next(t, poller.OutcomeSettleFailed); !errors.Is(e.SourceErr, queue.ErrLeaseExpired) {
		t.Fatalf("late Ack: %v, want ErrLeaseExpired", e.SourceErr)
	}
	if err := sub.Ack(ds[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := p.Stats(); st.Extended != 0 || st.Errors != 1 || st.InFlight != 0 {
		t.Fatalf("poller stats %+v, want no extension and the late Ack's error", st)
	}
}

// A prefetched lease on a local source is held as a running one is, and
// a drain releases it unspent.
func TestLocalPrefetchedLeaseIsHeld(t *testing.T) {
	mock, b, sub := newBroker(t)
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithMaxOutstanding(2), poller.WithBatch(2), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "b")
	r := start(t, p)
	c := recv(t, calls)
	eventually(t, func() bool { return p.Stats().InFlight == 2 })
	mock.Add(30 * time.Minute) // many visibility timeouts; half the default limit
	if st := sub.Stats(); st.InFlight != 2 || st.Redelivered != 0 {
		t.Fatalf("sub stats %+v, want both held", st)
	}
	r.cancel() // drain: "b" is released unspent, "a" finishes
	if e := ev.next(t, poller.OutcomeReleased); e.Delivery.Payload != "b" || e.SourceErr != nil {
		t.Fatalf("released %q (%v), want b", e.Delivery.Payload, e.SourceErr)
	}
	c.done <- nil
	if e := ev.next(t, poller.OutcomeAcked); e.SourceErr != nil {
		t.Fatal(e.SourceErr)
	}
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
	ds := sub.TryPoll(2)
	if len(ds) != 1 || ds[0].Payload != "b" || ds[0].Attempt != 1 {
		t.Fatalf("after the drain: %+v, want b, attempt 1", ds)
	}
}

// clocked is a source that reports its clock (backend.Clocked), as one
// that is not a subscription does.
type clocked struct {
	remote
	clk clock.Clock
}

func (c clocked) Clock() clock.Clock { return c.clk }

// A pool given no clock reads its source's, when the source reports one
// through a Clock method: moving the mock then extends the lease.
func TestPoolReadsClockedSourcesClock(t *testing.T) {
	mock, b, sub := newBroker(t) // visibility timeout 10s
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New[string](clocked{remote{sub}, mock}, blockingHandler(calls), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "slow")
	c := recv(t, calls)
	awaitQuiet(t, p)
	mock.Add(8 * time.Second) // the default margin for a 10s lease is 2s
	if e := ev.next(t, poller.OutcomeExtended); !e.Delivery.Deadline.Equal(epoch.Add(18 * time.Second)) {
		t.Fatalf("extended to %v, want 18s after the start", e.Delivery.Deadline.Sub(epoch))
	}
	c.done <- nil
	ev.next(t, poller.OutcomeAcked)
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
