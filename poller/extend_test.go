package poller_test

// Automatic lease extension: a slow handler's lease, and prefetched ones,
// are extended before they expire.

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

func TestExtensionKeepsSlowHandlerLeaseAlive(t *testing.T) {
	mock, b, sub := newBroker(t) // visibility timeout 10s
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	// The default margin for a 10s lease is 2s; extend for at most 60s.
	p, err := poller.New(sub, blockingHandler(calls), poller.WithExtension(0, time.Minute), ev.option())
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
	e := ev.next(t, poller.OutcomeAcked)
	if !errors.Is(e.SourceErr, queue.ErrLeaseExpired) {
		t.Fatalf("late Ack: %v, want ErrLeaseExpired", e.SourceErr)
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
	p, err := poller.New(sub, blockingHandler(calls), poller.WithMaxOutstanding(2), poller.WithBatch(2), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "b")
	r := start(t, p)
	c := recv(t, calls)
	if c.d.Payload != "a" {
		t.Fatalf("first call: %q", c.d.Payload)
	}
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
