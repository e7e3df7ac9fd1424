package poller_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// ackCounter is a broker subscription that counts its Ack and AckBatch
// calls, and whose AckBatch refuses the leases of refuse (as lost), having
// acked the rest, as a backend's partial failure does.
type ackCounter struct {
	*broker.Subscription[string]
	refuse map[lease.ID]bool

	mu      sync.Mutex
	acks    int   // Ack calls
	batches []int // AckBatch calls, by length
}

func (s *ackCounter) Ack(id lease.ID) error {
	s.mu.Lock()
	s.acks++
	s.mu.Unlock()
	return s.Subscription.Ack(id)
}

func (s *ackCounter) AckBatch(ids []lease.ID) error {
	s.mu.Lock()
	s.batches = append(s.batches, len(ids))
	s.mu.Unlock()
	errs := make([]error, len(ids))
	for i, id := range ids {
		if s.refuse[id] {
			errs[i] = queue.ErrLeaseExpired
		} else {
			errs[i] = s.Subscription.Ack(id)
		}
	}
	return queue.NewBatchError(errs)
}

func (s *ackCounter) calls() (int, []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acks, slices.Clone(s.batches)
}

// A batch pool over a source with AckBatch acks a call's successes in one
// AckBatch, not an Ack each; the failures settle one by one as before.
func TestBatchAcksInOneCall(t *testing.T) {
	_, b, sub := newBroker(t)
	src := &ackCounter{Subscription: sub}
	ev := newEvents[string]()
	p, err := poller.NewBatch(src, func(_ context.Context, ds []queue.Delivery[string]) ([]error, error) {
		outs := make([]error, len(ds))
		for i, d := range ds {
			if d.Payload == "c" {
				outs[i] = errors.New("bad row")
			}
		}
		return outs, nil
	}, poller.WithBatchMax(3, time.Hour), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "b", "c", "d", "e", "f")
	start(t, p)
	var acked []string
	for range 6 {
		e := recv(t, ev.ch)
		switch {
		case e.Outcome == poller.OutcomeAcked:
			acked = append(acked, e.Delivery.Payload)
		case e.Outcome != poller.OutcomeRetried || e.Delivery.Payload != "c":
			t.Fatalf("%s: %v (%v)", e.Delivery.Payload, e.Outcome, e.Err)
		}
	}
	quiet(t, p)
	slices.Sort(acked)
	if want := []string{"a", "b", "d", "e", "f"}; !slices.Equal(acked, want) {
		t.Fatalf("acked %v, want %v", acked, want)
	}
	if acks, batches := src.calls(); acks != 0 || !slices.Equal(batches, []int{2, 3}) {
		t.Fatalf("%d Acks, AckBatch calls of %v: want 0 and [2 3]", acks, batches)
	}
	if st := p.Stats(); st.Acked != 5 || st.Retried != 1 || st.Errors != 0 {
		t.Fatalf("%v", st)
	}
}

// A lease the source's AckBatch could not ack (its BatchError's entry) is
// that delivery's failed settle, reported and counted as an Ack's would
// be; the others of the call are acked.
func TestBatchAckPartialFailure(t *testing.T) {
	_, b, sub := newBroker(t)
	src := &ackCounter{Subscription: sub, refuse: map[lease.ID]bool{}}
	ev := newEvents[string]()
	p, err := poller.NewBatch(src, func(_ context.Context, ds []queue.Delivery[string]) ([]error, error) {
		for _, d := range ds {
			if d.Payload == "b" {
				src.refuse[d.LeaseID] = true // before the pool acks: the call has not returned
			}
		}
		return nil, nil
	}, poller.WithBatchMax(3, time.Hour), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "b", "c")
	start(t, p)
	for range 3 {
		e := recv(t, ev.ch)
		want := poller.OutcomeAcked
		if e.Delivery.Payload == "b" {
			want = poller.OutcomeSettleFailed
			if !errors.Is(e.SourceErr, queue.ErrLeaseExpired) {
				t.Fatalf("b: source error %v", e.SourceErr)
			}
		}
		if e.Outcome != want {
			t.Fatalf("%s: %v, want %v", e.Delivery.Payload, e.Outcome, want)
		}
	}
	quiet(t, p)
	if st := p.Stats(); st.Acked != 2 || st.Errors != 1 {
		t.Fatalf("%v: want 2 acked, 1 error", st)
	}
	if st := sub.Stats(); st.Acked != 2 || st.InFlight != 1 {
		t.Fatalf("%+v: want b's lease left to lapse", st)
	}
}
