package broker_test

// Durable dead letters: the store, redrive and dead-letter topics across a
// restart. Helpers are durable_test.go's.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// TestDurableDeadLettersAndRedrive: the dead-letter store survives a
// restart in order, with its reasons, attempts, errors and times; Redrive
// after a restart puts letters back in their place with attempts reset; a
// redrive before a restart survives it.
func TestDurableDeadLettersAndRedrive(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	work := d.subscribe("jobs", "work", broker.WithMaxAttempts(2), broker.WithVisibilityTimeout(10*time.Second))
	d.subscribe("tiny", "small", broker.WithMaxQueue(1))

	d.publish("jobs", "rej")
	require.NoError(t, work.Reject(pollOneDur(t, work).LeaseID, errors.New("bad input")))
	d.mock.Add(time.Second)
	d.publish("jobs", "nack")
	require.NoError(t, work.Nack(pollOneDur(t, work).LeaseID, 0))
	require.NoError(t, work.Nack(pollOneDur(t, work).LeaseID, 0))
	d.mock.Add(time.Second)
	d.publish("tiny", "fill")
	d.publish("tiny", "over")
	d.publish("jobs", "ttl", broker.WithTTL(5*time.Second))
	d.mock.Add(5 * time.Second)
	d.publish("jobs", "later")
	want := deadLettersOf(d.Broker)
	require.Equal(t, []string{"rej", "nack", "over", "ttl"}, deadPayloads(d.Broker))
	type why struct {
		Topic     string // the subscription's
		Reason    queue.Reason
		Attempts  int
		LastError string
	}
	var whys []why
	for _, dl := range want {
		whys = append(whys, why{dl.Topic, dl.Reason, dl.Attempts, dl.LastError})
	}
	require.Equal(t, []why{{"jobs", queue.ReasonRejected, 1, "bad input"}, {"jobs", queue.ReasonMaxAttempts, 2, "nacked"},
		{"tiny", queue.ReasonOverflow, 0, ""}, {"jobs", queue.ReasonExpired, 0, ""}}, whys)

	d.restart()
	require.Equal(t, want, deadLettersOf(d.Broker), "the dead letters, in order")
	rec := d.Recovery()
	require.Equal(t, 4, rec.DeadLetters)
	require.Equal(t, 2, rec.Messages) // "later" and "fill"

	n, err := d.Redrive(func(dl queue.DeadLetter[string]) bool {
		return dl.Message.Payload == "rej" || dl.Message.Payload == "nack"
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []string{"over", "ttl"}, deadPayloads(d.Broker))
	require.Equal(t, []string{"rej/1", "nack/1", "later/1"}, peek(t, d.sub("jobs", "work")), "attempts reset, places kept")

	// A redrive before a restart survives it; the TTL counts from the redrive.
	n, err = d.Redrive(func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload == "ttl" })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	d.restart()
	require.Equal(t, []string{"over"}, deadPayloads(d.Broker))
	require.Equal(t, []string{"rej/1", "nack/1", "ttl/1", "later/1"}, peek(t, d.sub("jobs", "work")))
	require.Equal(t, uint64(4), d.sub("jobs", "work").Stats().Published)
	d.mock.Add(5*time.Second - time.Millisecond)
	require.Equal(t, []string{"over"}, deadPayloads(d.Broker))
	d.mock.Add(time.Millisecond)
	require.Equal(t, []string{"over", "ttl"}, deadPayloads(d.Broker))

	t.Run("store bound", func(t *testing.T) {
		d := openDur[string](t, queue.StringCodec(), broker.WithDeadLetterLimit(2))
		s := d.subscribe("t", "s")
		for _, p := range []string{"r1", "r2", "r3"} {
			d.publish("t", p)
			require.NoError(t, s.Reject(pollOneDur(t, s).LeaseID, nil))
		}
		require.Equal(t, []string{"r2", "r3"}, deadPayloads(d.Broker))
		d.restart()
		require.Equal(t, []string{"r2", "r3"}, deadPayloads(d.Broker))
		require.Equal(t, 2, d.Recovery().DeadLetters)
		d.opts = []broker.Option{broker.WithDeadLetterLimit(1)} // a smaller bound on the next Open
		d.restart()
		require.Equal(t, []string{"r3"}, deadPayloads(d.Broker))
		d.restart()
		require.Equal(t, []string{"r3"}, deadPayloads(d.Broker))
	})
}

// TestDurableDeadLetterTopic: a subscription's dead-letter topic survives
// a restart, and so does what was routed there, which is not in the store.
func TestDurableDeadLetterTopic(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	work := d.subscribe("jobs", "work", broker.WithMaxAttempts(1), broker.WithDeadLetterTopic("dlq")) // created first
	d.subscribe("dlq", "reader")
	a := d.publish("jobs", "a", broker.WithHeaders(map[string]string{"h": "v"}))
	require.NoError(t, work.Nack(pollOneDur(t, work).LeaseID, 0))
	require.Empty(t, d.DeadLetters())

	d.restart()
	require.Empty(t, d.DeadLetters())
	require.Zero(t, d.Recovery().DeadLetters)
	reader := d.sub("dlq", "reader")
	dv := pollOneDur(t, reader)
	require.Equal(t, "a", dv.Payload)
	h := dv.Headers
	require.Equal(t, "v", h.Get("h"))
	require.Equal(t, queue.ReasonMaxAttempts.String(), h.Get(backend.HeaderReason))
	require.Equal(t, "1", h.Get(backend.HeaderAttempts))
	require.Equal(t, "nacked", h.Get(backend.HeaderLastError))
	require.Equal(t, "work", h.Get(backend.HeaderSubscription))
	require.Equal(t, "jobs", h.Get(backend.HeaderTopic))
	require.Equal(t, a.ID.String(), h.Get(backend.HeaderMessageID))
	require.NoError(t, reader.Release(dv.LeaseID))

	// The routing itself persists: a message leased on its last attempt at
	// the restart is routed to the dead-letter topic by Open.
	d.publish("jobs", "b")
	pollOneDur(t, d.sub("jobs", "work"))
	d.restart()
	require.Empty(t, d.DeadLetters())
	reader = d.sub("dlq", "reader")
	require.Equal(t, uint64(2), reader.Stats().Published)
	ds := reader.TryPoll(10)
	require.ElementsMatch(t, []string{"a", "b"}, payloads(ds))
	for _, dv := range ds {
		if dv.Payload == "b" {
			require.Equal(t, "lease expired", dv.Headers.Get(backend.HeaderLastError))
			require.Equal(t, "work", dv.Headers.Get(backend.HeaderSubscription))
		}
		require.NoError(t, reader.Release(dv.LeaseID))
	}
	d.restart()
	require.Empty(t, d.DeadLetters())
	require.ElementsMatch(t, []string{"a/1", "b/1"}, peek(t, d.sub("dlq", "reader")))

	// Open routes a dead letter to a dead-letter subscription restored
	// after the source subscription (created later): it must come after
	// what that subscription held, and keep its place across restarts.
	t.Run("routed by Open, in order", func(t *testing.T) {
		d := openDur[string](t, queue.StringCodec())
		work := d.subscribe("jobs", "work", broker.WithMaxAttempts(1), broker.WithDeadLetterTopic("dlq"))
		d.subscribe("dlq", "reader")
		d.publish("dlq", "x1")
		d.publish("dlq", "x2")
		d.publish("jobs", "b")
		pollOneDur(t, work)
		d.restart() // b is dead-lettered and routed by Open
		require.Equal(t, []string{"x1/1", "x2/1", "b/1"}, peek(t, d.sub("dlq", "reader")))
		for range 4 { // the same order every time, not by chance
			d.restart()
			require.Equal(t, []string{"x1/1", "x2/1", "b/1"}, peek(t, d.sub("dlq", "reader")))
		}
	})

	// A compaction that a routed dead letter triggers while Open is still
	// restoring must not drop what the subscriptions restored after it
	// hold. The sizes (messages in flight, payload length) vary where the
	// compaction falls.
	t.Run("compaction while Open routes", func(t *testing.T) {
		for _, c := range []struct{ inFlight, size int }{{2, 300}, {4, 600}, {4, 1000}, {8, 2000}} {
			d := openDur[string](t, queue.StringCodec(), broker.WithCompactMin(1))
			work := d.subscribe("jobs", "work", broker.WithMaxAttempts(1), broker.WithDeadLetterTopic("dlq"))
			d.subscribe("dlq", "reader")
			d.publish("dlq", strings.Repeat("x", c.size))
			want := []string{strings.Repeat("x", c.size)}
			for i := range c.inFlight {
				d.publish("jobs", fmt.Sprint("b", i))
				want = append(want, fmt.Sprint("b", i))
			}
			require.Len(t, work.TryPoll(c.inFlight), c.inFlight)
			d.restart() // the messages in flight are routed by Open
			require.ElementsMatch(t, want, payloads(d.sub("dlq", "reader").TryPoll(100)), "%+v: after the first restart", c)
			d.restart()
			require.ElementsMatch(t, want, payloads(d.sub("dlq", "reader").TryPoll(100)), "%+v: after the second restart", c)
		}
	})
}

// cancelCause is a cause whose Reject records ReasonCancelled, as a
// worker pool's cancelled job's (queue.RejectReason).
type cancelCause struct{}

func (cancelCause) Error() string                  { return "job cancelled" }
func (cancelCause) DeadLetterReason() queue.Reason { return queue.ReasonCancelled }

// TestDurableCancelledReason: a Reject of a cancellation is a dead letter
// of reason cancelled, counted as such (counts are since the broker
// started), and the letter's reason survives a restart.
func TestDurableCancelledReason(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	work := d.subscribe("jobs", "work")
	d.publish("jobs", "stuck")
	d.publish("jobs", "bad")
	require.NoError(t, work.Reject(pollOneDur(t, work).LeaseID, fmt.Errorf("stopped by on-call: %w", cancelCause{})))
	require.NoError(t, work.Reject(pollOneDur(t, work).LeaseID, errors.New("malformed")))
	check := func(when string, counts queue.DeadLetterCounts) {
		var got []string
		for _, dl := range deadLettersOf(d.Broker) {
			got = append(got, dl.Reason.String()+": "+dl.LastError)
		}
		require.Equal(t, []string{"cancelled: stopped by on-call: job cancelled", "rejected: malformed"}, got, when)
		st := d.sub("jobs", "work").Stats()
		require.Equal(t, counts, st.DeadLetteredBy, when)
	}
	check("before a restart", queue.DeadLetterCounts{Rejected: 1, Cancelled: 1})
	d.restart()
	check("after a restart", queue.DeadLetterCounts{})
}
