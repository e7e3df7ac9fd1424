package brokertest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// DefaultWait bounds the waits of the Require helpers in real time (see
// Recorder.SetWait): a wait that never ends fails the test, saying what
// the pool did with the message, instead of hanging it. It is never a
// timing assertion: a pool on a mock clock settles a message in
// microseconds once the clock allows it.
const DefaultWait = 10 * time.Second

// Recorder records what a worker pool did with each message, for
// RequireAcked and RequireHandled. Pass its Option to poller.New. Its
// methods are safe for concurrent use.
type Recorder[T any] struct {
	mu      sync.Mutex
	events  map[uuid.UUID][]poller.Event[T] // by message ID, in order
	changed chan struct{}                   // closed and replaced at every event
	wait    time.Duration                   // the Require helpers' bound
}

// NewRecorder returns an empty Recorder.
func NewRecorder[T any]() *Recorder[T] {
	return &Recorder[T]{events: map[uuid.UUID][]poller.Event[T]{}, changed: make(chan struct{}), wait: DefaultWait}
}

// SetWait sets how long, in real time, the Require helpers that wait on r
// wait before they fail the test (DefaultWait, 10 s, until set; d <= 0
// sets it back). A test that expects a message never to settle can set it
// short.
func (r *Recorder[T]) SetWait(d time.Duration) {
	if d <= 0 {
		d = DefaultWait
	}
	r.mu.Lock()
	r.wait = d
	r.mu.Unlock()
}

// Option is the poller option that feeds the recorder every outcome of
// the pool (poller.WithObserver). A pool may have other observers too.
func (r *Recorder[T]) Option() poller.Option {
	return poller.WithObserver(r.record)
}

func (r *Recorder[T]) record(ev poller.Event[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := ev.Delivery.ID
	r.events[id] = append(r.events[id], ev)
	close(r.changed)
	r.changed = make(chan struct{})
}

// Events returns the outcomes recorded for the message id, oldest first.
func (r *Recorder[T]) Events(id uuid.UUID) []poller.Event[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]poller.Event[T](nil), r.events[id]...)
}

// await waits until done, given the message's events, reports true, and
// returns them; it fails tb if that takes longer than r's wait.
func (r *Recorder[T]) await(tb TB, what string, id uuid.UUID, done func([]poller.Event[T]) bool) []poller.Event[T] {
	tb.Helper()
	r.mu.Lock()
	limit := r.wait
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		r.mu.Lock()
		evs, ch := r.events[id], r.changed
		r.mu.Unlock()
		if done(evs) {
			return evs
		}
		select {
		case <-ch:
		case <-ctx.Done():
			tb.Fatalf("%s: message %s: after %v of real time, the pool's outcomes for it are %s "+
				"(a message waiting for the mock clock to move, a backoff or a visibility timeout, settles only once the test moves it)",
				what, id, limit, describe(evs))
			return nil
		}
	}
}

// TB is what the Require helpers need of a *testing.T (or B, or F).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// RequireAcked waits until the pool acked the message id (its Ack
// succeeded), and fails the test if the pool dead-letters it first, or if
// neither happens within the recorder's wait (DefaultWait, 10 s, of real
// time; see SetWait). It returns the acked
// delivery: its Attempt says which attempt succeeded.
func RequireAcked[T any](tb TB, r *Recorder[T], id uuid.UUID) queue.Delivery[T] {
	tb.Helper()
	var acked queue.Delivery[T]
	r.await(tb, "brokertest.RequireAcked", id, func(evs []poller.Event[T]) bool {
		for _, ev := range evs {
			switch {
			case ev.Outcome == poller.OutcomeAcked:
				acked = ev.Delivery
				return true
			case ev.Outcome == poller.OutcomeDeadLettered:
				tb.Fatalf("brokertest.RequireAcked: message %s was dead-lettered: %s", id, describe(evs))
				return true
			}
		}
		return false
	})
	return acked
}

// RequireHandled waits until the pool has finished n deliveries of the
// message id (acked, retried, dead-lettered, released, or refused by the
// source: poller.OutcomeSettleFailed), up to the recorder's wait of real
// time (see SetWait), and returns the outcomes of all of them, oldest
// first.
// A test that moves a mock clock calls it to know that the attempt it let
// run is over before the next move.
func RequireHandled[T any](tb TB, r *Recorder[T], id uuid.UUID, n int) []poller.Event[T] {
	tb.Helper()
	var settled []poller.Event[T]
	r.await(tb, fmt.Sprintf("brokertest.RequireHandled(%d)", n), id, func(evs []poller.Event[T]) bool {
		settled = settled[:0]
		for _, ev := range evs {
			switch ev.Outcome {
			case poller.OutcomeAcked, poller.OutcomeRetried, poller.OutcomeDeadLettered, poller.OutcomeReleased, poller.OutcomeSettleFailed:
				settled = append(settled, ev)
			}
		}
		return len(settled) >= n
	})
	return settled
}

// RequireDeadLettered fails the test unless b holds a dead letter of the
// message id, with the reason and last error given (the cause the handler
// failed with, "nacked", "lease expired", or "" for an overflow or a TTL
// before any delivery). It returns the dead letter. It looks once, at
// once: after a pool's dead-lettering, RequireHandled waits for it.
func RequireDeadLettered[T any](tb TB, b *broker.Broker[T], id uuid.UUID, reason queue.Reason, lastError string) queue.DeadLetter[T] {
	tb.Helper()
	var found []queue.DeadLetter[T]
	for _, dl := range b.DeadLetters() {
		if dl.Message.ID == id {
			found = append(found, dl)
		}
	}
	for _, dl := range found {
		if dl.Reason == reason && dl.LastError == lastError {
			return dl
		}
	}
	if len(found) == 0 {
		tb.Fatalf("brokertest.RequireDeadLettered: message %s is not dead-lettered", id)
		return queue.DeadLetter[T]{}
	}
	var got []string
	for _, dl := range found {
		got = append(got, fmt.Sprintf("%s (%s) by %s after %d attempts, last error %q", dl.Reason, dl.Subscription, dl.At.Format(time.RFC3339Nano), dl.Attempts, dl.LastError))
	}
	tb.Fatalf("brokertest.RequireDeadLettered: message %s: want %s with last error %q, have %v", id, reason, lastError, got)
	return queue.DeadLetter[T]{}
}

// RequireQueued fails the test unless s holds exactly n messages not yet
// settled: visible, delayed, held back behind an ordering key, or in
// flight. The failure says where they are.
func RequireQueued[T any](tb TB, s *broker.Subscription[T], n int) {
	tb.Helper()
	st := s.Stats()
	if got := st.Visible + st.Delayed + st.HeldBack + st.InFlight; got != n {
		tb.Fatalf("brokertest.RequireQueued: %s/%s holds %d messages (visible %d, delayed %d, held back %d, in flight %d), want %d",
			s.Topic(), s.Name(), got, st.Visible, st.Delayed, st.HeldBack, st.InFlight, n)
	}
}

// RequireNothingDelivered fails the test if s ever delivered a message.
func RequireNothingDelivered[T any](tb TB, s *broker.Subscription[T]) {
	tb.Helper()
	if st := s.Stats(); st.Delivered != 0 {
		tb.Fatalf("brokertest.RequireNothingDelivered: %s/%s delivered %d times (acked %d, dead-lettered %d, in flight %d)",
			s.Topic(), s.Name(), st.Delivered, st.Acked, st.DeadLettered, st.InFlight)
	}
}

// describe lists a message's outcomes for a failure message.
func describe[T any](evs []poller.Event[T]) string {
	if len(evs) == 0 {
		return "none"
	}
	s := ""
	for i, ev := range evs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("attempt %d %s", ev.Delivery.Attempt, ev.Outcome)
		if ev.Err != nil {
			s += fmt.Sprintf(" (%v)", ev.Err)
		}
		if ev.SourceErr != nil {
			s += fmt.Sprintf(" [source: %v]", ev.SourceErr)
		}
	}
	return s
}
