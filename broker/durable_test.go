package broker_test

// Behaviour tests of the durable broker (broker.Open), through the public
// API only. A restart here is Close, then Open of the same directory on a
// new mock clock set to the old one's time (or later); crashes are
// crash_test.go's.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/vocab"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// durEpoch is where the mock clocks of these tests start, unless a test
// says otherwise.
var durEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// durBroker is a durable broker under test, with its directory, codec,
// options and mock clock. The embedded broker is replaced by restart.
type durBroker[T any] struct {
	*broker.Broker[T]
	t     *testing.T
	dir   string
	codec broker.Codec[T]
	opts  []broker.Option
	mock  *clock.Mock
}

// openDur opens a durable broker (SyncNone unless opts say otherwise) in a
// new directory, on a mock clock set to durEpoch.
func openDur[T any](t *testing.T, codec broker.Codec[T], opts ...broker.Option) *durBroker[T] {
	t.Helper()
	return openDurAt(t, durEpoch, codec, opts...)
}

func openDurAt[T any](t *testing.T, start time.Time, codec broker.Codec[T], opts ...broker.Option) *durBroker[T] {
	t.Helper()
	d := &durBroker[T]{t: t, dir: t.TempDir(), codec: codec, opts: opts}
	mock := clock.NewMock()
	mock.Set(start)
	d.open(mock)
	return d
}

// tryOpen opens d's directory with codec on mock; the broker is closed
// when the test ends.
func (d *durBroker[T]) tryOpen(mock *clock.Mock, codec broker.Codec[T]) (*broker.Broker[T], error) {
	opts := append([]broker.Option{broker.WithClock(mock), broker.WithSync(broker.SyncNone)}, d.opts...)
	b, err := broker.Open(d.dir, codec, opts...)
	if err == nil {
		d.t.Cleanup(func() { b.Close() })
	}
	return b, err
}

func (d *durBroker[T]) open(mock *clock.Mock) {
	d.t.Helper()
	b, err := d.tryOpen(mock, d.codec)
	require.NoError(d.t, err)
	d.Broker, d.mock = b, mock
}

// restartAt closes the broker and opens its directory again on a new mock
// clock set to at.
func (d *durBroker[T]) restartAt(at time.Time) {
	d.t.Helper()
	require.NoError(d.t, d.Close())
	mock := clock.NewMock()
	mock.Set(at)
	d.open(mock)
}

// restart is restartAt the old clock's time.
func (d *durBroker[T]) restart() { d.t.Helper(); d.restartAt(d.mock.Now()) }

// sub returns the subscription name on topic, failing the test if there is
// none.
func (d *durBroker[T]) sub(topic, name string) *broker.Subscription[T] {
	d.t.Helper()
	s, err := d.Subscription(topic, name)
	require.NoError(d.t, err)
	return s
}

// subscribe creates topic if needed and subscribes name to it.
func (d *durBroker[T]) subscribe(topic, name string, opts ...broker.SubscribeOption) *broker.Subscription[T] {
	d.t.Helper()
	require.NoError(d.t, d.CreateTopic(topic))
	s, err := d.Subscribe(topic, name, opts...)
	require.NoError(d.t, err)
	return s
}

func (d *durBroker[T]) publish(topic string, payload T, opts ...broker.PublishOption) queue.Message[T] {
	d.t.Helper()
	m, err := d.Publish(context.Background(), topic, payload, opts...)
	require.NoError(d.t, err)
	return m
}

// pollOneDur leases the next visible message of s, failing the test if
// there is none.
func pollOneDur[T any](t *testing.T, s *broker.Subscription[T]) queue.Delivery[T] {
	t.Helper()
	ds := s.TryPoll(1)
	require.Len(t, ds, 1, "a visible message")
	return ds[0]
}

// peek returns what s would deliver now, in order, as "payload/attempt",
// and hands every lease back without spending its attempt.
func peek(t *testing.T, s *broker.Subscription[string]) []string {
	t.Helper()
	var out []string
	for _, d := range s.TryPoll(1 << 20) {
		out = append(out, fmt.Sprintf("%s/%d", d.Payload, d.Attempt))
		require.NoError(t, s.Release(d.LeaseID))
	}
	return out
}

// durDead is a dead letter in comparable form.
type durDead struct {
	Sub, ID, Payload, LastError string
	Reason                      queue.Reason
	Attempts                    int
	At                          int64
}

func deadLettersOf[T any](b *broker.Broker[T]) []durDead {
	var out []durDead
	for _, dl := range b.DeadLetters() {
		out = append(out, durDead{dl.Subscription, dl.Message.ID.String(), fmt.Sprint(dl.Message.Payload), dl.LastError,
			dl.Reason, dl.Attempts, dl.At.UnixNano()})
	}
	return out
}

func deadPayloads[T any](b *broker.Broker[T]) []string {
	var out []string
	for _, dl := range b.DeadLetters() {
		out = append(out, fmt.Sprint(dl.Message.Payload))
	}
	return out
}

// requireSameMessage checks that got is want, as it came back from disk.
func requireSameMessage[T any](t *testing.T, want, got queue.Message[T], what string) {
	t.Helper()
	require.Equal(t, want.ID, got.ID, what)
	require.Equal(t, want.Topic, got.Topic, what)
	require.Equal(t, want.Key, got.Key, what)
	require.Equal(t, want.Priority, got.Priority, what)
	require.Equal(t, want.Payload, got.Payload, what)
	require.Equal(t, maps.Collect(want.Headers.All()), maps.Collect(got.Headers.All()), what)
	require.Equal(t, want.PublishedAt.UnixNano(), got.PublishedAt.UnixNano(), what)
	require.True(t, want.PublishedAt.Equal(got.PublishedAt), "%s: PublishedAt %v, want %v", what, got.PublishedAt, want.PublishedAt)
}

// segFile returns the journal's one segment file in dir and its size.
func segFile(t *testing.T, dir string) (string, int64) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "seg-*.log"))
	require.NoError(t, err)
	require.Len(t, segs, 1, "one segment file in %s", dir)
	fi, err := os.Stat(segs[0])
	require.NoError(t, err)
	return segs[0], fi.Size()
}

type durOrder struct {
	N    int
	Note string
	Tags []string
}

// TestDurableRoundTrip: topics, a subscription's options and every part of
// its messages (ID, payload, key, priority, headers, PublishedAt, delay,
// TTL, ordering key hold) come back after a restart, delivered in the same
// order; an acked message does not. Run from the mock clock's own start
// (the Unix epoch, which must not read back as "no time") and from a date.
func TestDurableRoundTrip(t *testing.T) {
	for _, start := range []time.Time{time.Unix(0, 0), durEpoch} {
		t.Run(start.UTC().Format("2006"), func(t *testing.T) {
			d := openDurAt(t, start, broker.JSONCodec[durOrder]{})
			require.NoError(t, d.CreateTopic("orders"))
			require.NoError(t, d.CreateTopic("audit"))
			s := d.subscribe("orders", "billing", broker.WithMaxAttempts(7), broker.WithVisibilityTimeout(45*time.Second),
				broker.WithRetry(queue.RetryPolicy{Initial: 3 * time.Second, Max: 40 * time.Second, Multiplier: 3}),
				broker.WithMaxQueue(1000), broker.WithMaxInFlight(50), broker.WithMessageTTL(2*time.Hour))
			wantCfg := s.Config()

			pub := func(n int, opts ...broker.PublishOption) queue.Message[durOrder] {
				d.mock.Add(time.Second) // a PublishedAt of its own
				return d.publish("orders", durOrder{N: n, Note: fmt.Sprint("order ", n), Tags: []string{"t", fmt.Sprint(n)}}, opts...)
			}
			acked := pub(0, broker.WithPriority(queue.PriorityCritical))
			first := pollOneDur(t, s)
			require.Equal(t, acked.ID, first.ID)
			require.NoError(t, s.Ack(first.LeaseID))
			m1 := pub(1, broker.WithKey("k1"), broker.WithHeaders(map[string]string{"trace": "abc", "tenant": "eu", "empty": ""}))
			m2 := pub(2, broker.WithPriority(queue.PriorityLow))
			m3 := pub(3, broker.WithPriority(queue.PriorityCritical), broker.WithHeaders(map[string]string{"x": "y"}))
			m4 := pub(4, broker.WithPriority(queue.PriorityHigh), broker.WithKey("k2"))
			m5 := pub(5)
			m6 := pub(6, broker.WithDelay(30*time.Minute))
			m7 := pub(7, broker.WithPriority(queue.PriorityHigh), broker.WithTTL(10*time.Minute))
			m8 := pub(8, broker.WithPriority(queue.PriorityCritical), broker.WithKey("k1")) // held back behind m1
			require.Equal(t, queue.Stats{Published: 9, Delivered: 1, Acked: 1, Visible: 6, Delayed: 1, HeldBack: 1}, s.Stats())

			d.restart()
			rec := d.Recovery()
			require.Positive(t, rec.Records)
			require.Equal(t, broker.RecoveryInfo{Records: rec.Records, Topics: 2, Subscriptions: 1, Messages: 8}, rec)
			require.Equal(t, []string{"audit", "orders"}, d.Topics())
			s = d.sub("orders", "billing")
			gotCfg := s.Config()
			wantCfg.Clock, gotCfg.Clock = nil, nil
			require.Equal(t, wantCfg, gotCfg, "the subscription's options")
			require.Equal(t, queue.Stats{Published: 8, Visible: 6, Delayed: 1, HeldBack: 1}, s.Stats(),
				"counters start from zero; restored messages count as published")
			require.Empty(t, d.DeadLetters())

			ds := s.TryPoll(100)
			want := []queue.Message[durOrder]{m3, m4, m7, m1, m5, m2} // priority, then publish order; m8 waits for m1
			require.Len(t, ds, len(want))
			for i, dv := range ds {
				requireSameMessage(t, want[i], dv.Message, fmt.Sprintf("delivery %d", i))
				require.Equal(t, 1, dv.Attempt)
				require.True(t, dv.Deadline.Equal(d.mock.Now().Add(45*time.Second)), "deadline %v", dv.Deadline)
			}
			require.NoError(t, s.AckBatch([]lease.ID{ds[0].LeaseID, ds[1].LeaseID, ds[3].LeaseID, ds[4].LeaseID, ds[5].LeaseID}))
			dv := pollOneDur(t, s) // m1 acked: its key goes on
			requireSameMessage(t, m8, dv.Message, "m8")
			require.NoError(t, s.Ack(dv.LeaseID))
			require.Empty(t, s.TryPoll(1))
			// m7, left leased, keeps its TTL from before the restart: it
			// expires 10 minutes after its publish.
			d.mock.Set(m7.PublishedAt.Add(10*time.Minute - time.Millisecond))
			require.Empty(t, d.DeadLetters())
			d.mock.Set(m7.PublishedAt.Add(10 * time.Minute))
			dls := d.DeadLetters()
			require.Len(t, dls, 1)
			requireSameMessage(t, m7, dls[0].Message, "m7")
			require.Equal(t, queue.ReasonExpired, dls[0].Reason)
			// m6 turns visible 30 minutes after its publish.
			d.mock.Set(m6.PublishedAt.Add(30*time.Minute - time.Millisecond))
			require.Empty(t, s.TryPoll(1))
			d.mock.Set(m6.PublishedAt.Add(30 * time.Minute))
			dv = pollOneDur(t, s)
			requireSameMessage(t, m6, dv.Message, "m6")
		})
	}
}

// TestDurableTimesAreAbsolute: delays, backoffs and TTLs are instants on
// the broker's clock: a restart neither restarts nor forgets them.
func TestDurableTimesAreAbsolute(t *testing.T) {
	setup := func(t *testing.T) (*durBroker[string], *broker.Subscription[string], time.Time) {
		d := openDur[string](t, broker.StringCodec{})
		s := d.subscribe("t", "s", broker.WithVisibilityTimeout(time.Minute),
			broker.WithRetry(queue.RetryPolicy{Initial: 20 * time.Second, Max: time.Hour}))
		return d, s, d.mock.Now()
	}
	// visibleFrom checks that nothing is visible just before at, and that
	// payload (on its attempt) is at at.
	visibleFrom := func(t *testing.T, d *durBroker[string], at time.Time, payload string, attempt int) queue.Delivery[string] {
		t.Helper()
		s := d.sub("t", "s")
		d.mock.Set(at.Add(-time.Millisecond))
		require.Empty(t, s.TryPoll(1), "visible before %v", at)
		require.Equal(t, 1, s.Stats().Delayed)
		d.mock.Set(at)
		dv := pollOneDur(t, s)
		require.Equal(t, payload, dv.Payload)
		require.Equal(t, attempt, dv.Attempt)
		return dv
	}

	t.Run("nack delay", func(t *testing.T) {
		d, s, t0 := setup(t)
		d.publish("t", "a")
		require.NoError(t, s.Nack(pollOneDur(t, s).LeaseID, 30*time.Second))
		d.restartAt(t0.Add(10 * time.Second))
		visibleFrom(t, d, t0.Add(30*time.Second), "a", 2)
	})
	t.Run("retry backoff", func(t *testing.T) {
		d, s, t0 := setup(t)
		d.publish("t", "a")
		require.NoError(t, s.Fail(pollOneDur(t, s).LeaseID, errors.New("boom")))
		d.restartAt(t0.Add(5 * time.Second))
		dv := visibleFrom(t, d, t0.Add(20*time.Second), "a", 2)
		// The recovered RetryPolicy: the second failure waits 40s.
		require.NoError(t, d.sub("t", "s").Fail(dv.LeaseID, errors.New("boom")))
		visibleFrom(t, d, t0.Add(60*time.Second), "a", 3)
	})
	t.Run("delayed publish", func(t *testing.T) {
		d, _, t0 := setup(t)
		d.publish("t", "a", broker.WithDelay(30*time.Second))
		d.restartAt(t0.Add(10 * time.Second))
		visibleFrom(t, d, t0.Add(30*time.Second), "a", 1)
	})
	t.Run("downtime longer than the delays", func(t *testing.T) {
		d, s, t0 := setup(t)
		d.publish("t", "delayed", broker.WithDelay(30*time.Second))
		d.publish("t", "nacked")
		require.NoError(t, s.Nack(pollOneDur(t, s).LeaseID, 30*time.Second))
		d.restartAt(t0.Add(time.Hour))
		require.Equal(t, []string{"delayed/1", "nacked/2"}, peek(t, d.sub("t", "s")))
	})
	t.Run("ttl", func(t *testing.T) {
		d, _, t0 := setup(t)
		m := d.publish("t", "a", broker.WithTTL(time.Minute))
		d.restartAt(t0.Add(30 * time.Second))
		s := d.sub("t", "s")
		d.mock.Set(t0.Add(time.Minute - time.Millisecond))
		require.Equal(t, 1, s.Stats().Visible)
		require.Empty(t, d.DeadLetters())
		d.mock.Set(t0.Add(time.Minute))
		require.Equal(t, []durDead{{"s", m.ID.String(), "a", "", queue.ReasonExpired, 0, d.mock.Now().UnixNano()}}, deadLettersOf(d.Broker))
		require.Empty(t, s.TryPoll(1))
	})
	t.Run("ttl passed while down", func(t *testing.T) {
		d, _, t0 := setup(t)
		d.publish("t", "a", broker.WithTTL(time.Minute))
		d.restartAt(t0.Add(2 * time.Minute))
		require.Equal(t, []string{"a"}, deadPayloads(d.Broker))
		require.Equal(t, queue.ReasonExpired, d.DeadLetters()[0].Reason)
		require.Empty(t, d.sub("t", "s").TryPoll(1))
	})
	t.Run("in flight past its ttl", func(t *testing.T) {
		d, s, t0 := setup(t)
		d.publish("t", "a", broker.WithTTL(time.Minute))
		pollOneDur(t, s)
		d.restartAt(t0.Add(2 * time.Minute))
		dls := d.DeadLetters()
		require.Len(t, dls, 1)
		require.Equal(t, queue.ReasonExpired, dls[0].Reason)
		require.Equal(t, 1, dls[0].Attempts)
		require.Equal(t, "lease expired", dls[0].LastError)
	})
}

// TestDurableLeasedAtRestart: no lease survives a restart; a message leased
// at the restart comes back as if its lease had expired.
func TestDurableLeasedAtRestart(t *testing.T) {
	const vis = time.Minute
	setup := func(t *testing.T) (*durBroker[string], *broker.Subscription[string]) {
		d := openDur[string](t, broker.StringCodec{})
		return d, d.subscribe("t", "s", broker.WithMaxAttempts(3), broker.WithVisibilityTimeout(vis))
	}

	t.Run("attempt counted, and the last one dead-lettered", func(t *testing.T) {
		d, s := setup(t)
		m := d.publish("t", "a")
		for attempt := 1; attempt <= 3; attempt++ {
			dv := pollOneDur(t, s)
			require.Equal(t, attempt, dv.Attempt)
			require.Equal(t, m.ID, dv.ID)
			require.True(t, dv.Deadline.Equal(d.mock.Now().Add(vis)))
			d.restart() // the lease has not expired: the restart ends it
			s = d.sub("t", "s")
		}
		// Leased on its last attempt at the restart: dead-lettered by Open.
		require.Equal(t, []durDead{{"s", m.ID.String(), "a", "lease expired", queue.ReasonMaxAttempts, 3, d.mock.Now().UnixNano()}},
			deadLettersOf(d.Broker))
		require.Empty(t, s.TryPoll(1))
		st := s.Stats()
		require.Equal(t, queue.Stats{Published: 1, DeadLettered: 1}, st)
		require.Equal(t, st.Published+st.Redriven, st.Acked+st.DeadLettered+st.Dropped+uint64(st.Visible+st.Delayed+st.InFlight+st.HeldBack),
			"stats balance: %+v", st)
		d.restart()
		require.Equal(t, 1, d.Recovery().DeadLetters)
		require.Zero(t, d.Recovery().Messages)
		require.Equal(t, []string{"a"}, deadPayloads(d.Broker))
	})
	t.Run("lease expired before the restart counts once", func(t *testing.T) {
		d, s := setup(t)
		d.publish("t", "a")
		pollOneDur(t, s)
		d.mock.Add(vis)
		require.Equal(t, 1, s.Stats().Visible)
		d.restart()
		require.Equal(t, []string{"a/2"}, peek(t, d.sub("t", "s")))
	})
	t.Run("release spends no attempt", func(t *testing.T) {
		d, s := setup(t)
		d.publish("t", "a")
		require.NoError(t, s.Release(pollOneDur(t, s).LeaseID))
		d.restart()
		s = d.sub("t", "s")
		dv := pollOneDur(t, s)
		require.Equal(t, 1, dv.Attempt)
		require.NoError(t, s.Nack(dv.LeaseID, 0))
		dv = pollOneDur(t, s)
		require.Equal(t, 2, dv.Attempt)
		require.NoError(t, s.Release(dv.LeaseID))
		d.restart()
		require.Equal(t, []string{"a/2"}, peek(t, d.sub("t", "s")))
	})
	t.Run("late ack", func(t *testing.T) {
		d, s := setup(t)
		d.publish("t", "a")
		dv := pollOneDur(t, s)
		d.mock.Add(vis + time.Second)
		require.NoError(t, s.Ack(dv.LeaseID)) // after the deadline, before a redelivery
		d.restart()
		s = d.sub("t", "s")
		require.Empty(t, s.TryPoll(1))
		require.Zero(t, s.Stats().Published)
	})
	t.Run("ordering key", func(t *testing.T) {
		d, s := setup(t)
		d.publish("t", "k-a", broker.WithKey("k"))
		d.publish("t", "k-b", broker.WithKey("k"))
		d.publish("t", "c")
		require.Equal(t, []string{"k-a", "c"}, payloads(s.TryPoll(10)))
		d.restart()
		s = d.sub("t", "s")
		require.Equal(t, 1, s.Stats().HeldBack)
		ds := s.TryPoll(10)
		require.Equal(t, []string{"k-a", "c"}, payloads(ds), "k-b waits for k-a")
		require.Equal(t, 2, ds[0].Attempt)
		require.NoError(t, s.Ack(ds[0].LeaseID))
		dv := pollOneDur(t, s)
		require.Equal(t, "k-b", dv.Payload)
		require.Equal(t, 1, dv.Attempt)
	})
}

// TestDurableDeadLettersAndRedrive: the dead-letter store survives a
// restart in order, with its reasons, attempts, errors and times; Redrive
// after a restart puts letters back in their place with attempts reset; a
// redrive before a restart survives it.
func TestDurableDeadLettersAndRedrive(t *testing.T) {
	d := openDur[string](t, broker.StringCodec{})
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
		Reason    queue.Reason
		Attempts  int
		LastError string
	}
	var whys []why
	for _, dl := range want {
		whys = append(whys, why{dl.Reason, dl.Attempts, dl.LastError})
	}
	require.Equal(t, []why{{queue.ReasonRejected, 1, "bad input"}, {queue.ReasonMaxAttempts, 2, "nacked"},
		{queue.ReasonOverflow, 0, ""}, {queue.ReasonExpired, 0, ""}}, whys)

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
		d := openDur[string](t, broker.StringCodec{}, broker.WithDeadLetterLimit(2))
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

// TestDurableResubscribe: a recovered subscription is declared again with
// Subscribe, which returns it and applies its options from then on; the
// options persist, the filter does not.
func TestDurableResubscribe(t *testing.T) {
	keep := broker.WithFilter(func(m queue.Message[string]) bool { return strings.HasPrefix(m.Payload, "keep") })
	fresh := broker.WithFilter(func(m queue.Message[string]) bool { return strings.HasPrefix(m.Payload, "new") })
	d := openDur[string](t, broker.StringCodec{})
	d.subscribe("t", "s", broker.WithMaxAttempts(5), broker.WithVisibilityTimeout(10*time.Second), keep)
	d.publish("t", "keep1")
	d.publish("t", "drop1")
	d.publish("t", "keep2")

	d.restart()
	s := d.sub("t", "s") // before Subscribe
	require.Equal(t, 5, s.Config().MaxAttempts)
	d.publish("t", "drop2") // no filter until the subscription is declared again
	again, err := d.Subscribe("t", "s", broker.WithMaxAttempts(5), broker.WithVisibilityTimeout(10*time.Second), keep)
	require.NoError(t, err)
	require.Same(t, s, again)
	_, err = d.Subscribe("t", "s", broker.WithMaxAttempts(5), broker.WithVisibilityTimeout(10*time.Second), keep)
	require.ErrorIs(t, err, broker.ErrAlreadySubscribed)
	d.publish("t", "drop3")
	require.Equal(t, []string{"keep1/1", "keep2/1", "drop2/1"}, peek(t, s))

	// Other options: they apply from now on.
	d.restart()
	s, err = d.Subscribe("t", "s", broker.WithMaxAttempts(2), broker.WithVisibilityTimeout(20*time.Second), fresh)
	require.NoError(t, err)
	require.Equal(t, 2, s.Config().MaxAttempts)
	require.Equal(t, 20*time.Second, s.Config().VisibilityTimeout)
	d.publish("t", "keep3")
	d.publish("t", "new1")
	ds := s.TryPoll(10)
	require.Equal(t, []string{"keep1", "keep2", "drop2", "new1"}, payloads(ds))
	for _, dv := range ds {
		require.True(t, dv.Deadline.Equal(d.mock.Now().Add(20*time.Second)))
		require.NoError(t, s.Nack(dv.LeaseID, 0))
	}
	for _, dv := range s.TryPoll(10) {
		require.Equal(t, 2, dv.Attempt)
		require.NoError(t, s.Nack(dv.LeaseID, 0)) // the new limit
	}
	require.Equal(t, []string{"keep1", "keep2", "drop2", "new1"}, deadPayloads(d.Broker))

	// ... and persist without being given again.
	d.restart()
	s = d.sub("t", "s")
	require.Equal(t, 2, s.Config().MaxAttempts)
	require.Equal(t, 20*time.Second, s.Config().VisibilityTimeout)
	d.publish("t", "x")
	dv := pollOneDur(t, s)
	require.True(t, dv.Deadline.Equal(d.mock.Now().Add(20*time.Second)))
	require.NoError(t, s.Nack(dv.LeaseID, 0))
	require.NoError(t, s.Nack(pollOneDur(t, s).LeaseID, 0))
	dls := d.DeadLetters()
	require.Len(t, dls, 5)
	require.Equal(t, "x", dls[4].Message.Payload)
	require.Equal(t, 2, dls[4].Attempts)

	t.Run("wildcard", func(t *testing.T) {
		d := openDur[string](t, broker.StringCodec{})
		require.NoError(t, d.CreateTopic("orders.eu"))
		_, err := d.Subscribe("orders.*", "all", broker.WithMaxAttempts(3))
		require.NoError(t, err)
		d.publish("orders.eu", "a")
		d.restart()
		require.NoError(t, d.CreateTopic("orders.us"))
		d.publish("orders.us", "b")
		s := d.sub("orders.*", "all")
		require.Equal(t, 3, s.Config().MaxAttempts)
		again, err := d.Subscribe("orders.*", "all", broker.WithMaxAttempts(3))
		require.NoError(t, err)
		require.Same(t, s, again)
		require.Equal(t, []string{"a/1", "b/1"}, peek(t, s))
		d.restart()
		require.Equal(t, []string{"a/1", "b/1"}, peek(t, d.sub("orders.*", "all")))
	})

	t.Run("retry jitter source", func(t *testing.T) {
		// Subscribe after a restart with a RetryPolicy whose Rand is the
		// only difference from what the journal has: Rand (a function, not
		// persisted) must apply from then on, like every other option.
		retry := func(r func() float64) broker.SubscribeOption {
			return broker.WithRetry(queue.RetryPolicy{Initial: 40 * time.Second, Max: time.Minute, Jitter: 0.5, Rand: r})
		}
		d := openDur[string](t, broker.StringCodec{})
		d.subscribe("t", "s", retry(func() float64 { return 0 }))
		d.restart()
		s, err := d.Subscribe("t", "s", retry(func() float64 { return 0.999999 })) // takes half the delay off
		require.NoError(t, err)
		d.publish("t", "a")
		require.NoError(t, s.Fail(pollOneDur(t, s).LeaseID, errors.New("boom")))
		d.mock.Add(20*time.Second + time.Millisecond)
		require.Len(t, s.TryPoll(1), 1, "a 40s backoff with half of it jittered off by the Rand given to Subscribe")
	})
}

// TestDurableRemovalsPersist: Unsubscribe, DeleteTopic and Purge are not
// undone by a restart; the dead letters of what they removed stay.
func TestDurableRemovalsPersist(t *testing.T) {
	d := openDur[string](t, broker.StringCodec{})
	keep := d.subscribe("a", "keep")
	gone := d.subscribe("a", "gone")
	x := d.subscribe("b", "x")
	p := d.subscribe("c", "p")
	reject := func(s *broker.Subscription[string], want string) {
		t.Helper()
		dv := pollOneDur(t, s)
		require.Equal(t, want, dv.Payload)
		require.NoError(t, s.Reject(dv.LeaseID, nil))
	}
	d.publish("a", "a1")
	reject(gone, "a1")
	d.publish("a", "a2")
	require.Equal(t, []string{"a1/1", "a2/1"}, peek(t, keep))
	d.publish("b", "b1")
	reject(x, "b1")
	d.publish("b", "b2")
	d.publish("c", "c1")
	reject(p, "c1")
	d.publish("c", "c2")
	d.publish("c", "c3")
	pollOneDur(t, p) // in flight: purged too

	require.NoError(t, d.Unsubscribe("a", "gone"))
	require.NoError(t, d.DeleteTopic("b"))
	n, err := p.Purge()
	require.NoError(t, err)
	require.Equal(t, 2, n)

	d.restart()
	require.Equal(t, []string{"a", "c"}, d.Topics())
	subs, err := d.Subscriptions("a")
	require.NoError(t, err)
	require.Equal(t, []string{"keep"}, subs)
	_, err = d.Subscription("a", "gone")
	require.ErrorIs(t, err, broker.ErrSubscriptionNotFound)
	_, err = d.Subscription("b", "x")
	require.ErrorIs(t, err, broker.ErrTopicNotFound)
	require.Empty(t, d.sub("c", "p").TryPoll(10))
	require.Zero(t, d.sub("c", "p").Stats().Published)
	require.Equal(t, []string{"a1/1", "a2/1"}, peek(t, d.sub("a", "keep")))
	require.Equal(t, []string{"a1", "b1", "c1"}, deadPayloads(d.Broker))
	require.Equal(t, broker.RecoveryInfo{Records: d.Recovery().Records, Topics: 2, Subscriptions: 2, Messages: 2, DeadLetters: 3}, d.Recovery())

	// The same through a snapshot: the dead letters of removed
	// subscriptions and topics are kept by compaction.
	require.NoError(t, d.Compact())
	d.restart()
	require.Equal(t, []string{"a", "c"}, d.Topics())
	require.Equal(t, []string{"a1", "b1", "c1"}, deadPayloads(d.Broker))
	require.Equal(t, []string{"a1/1", "a2/1"}, peek(t, d.sub("a", "keep")))
	require.Empty(t, d.sub("c", "p").TryPoll(10))

	// A new subscription of the old name starts empty; the old one's dead
	// letter can be redriven to it, and stays there across a restart.
	again, err := d.Subscribe("a", "gone")
	require.NoError(t, err)
	require.Empty(t, again.TryPoll(10))
	n, err = d.Redrive(func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload == "a1" })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	d.restart()
	require.Equal(t, []string{"b1", "c1"}, deadPayloads(d.Broker))
	require.Equal(t, []string{"a1/1"}, peek(t, d.sub("a", "gone")))
	require.Equal(t, []string{"a1/1", "a2/1"}, peek(t, d.sub("a", "keep")))

	// A recovered subscription can be removed before it is declared again.
	require.NoError(t, d.Unsubscribe("a", "keep"))
	d.restart()
	subs, err = d.Subscriptions("a")
	require.NoError(t, err)
	require.Equal(t, []string{"gone"}, subs)

	t.Run("wildcard subscription keeps a deleted topic's messages", func(t *testing.T) {
		d := openDur[string](t, broker.StringCodec{})
		require.NoError(t, d.CreateTopic("x.a"))
		require.NoError(t, d.CreateTopic("x.b"))
		_, err := d.Subscribe("x.*", "all")
		require.NoError(t, err)
		d.publish("x.a", "a")
		d.publish("x.b", "b")
		require.NoError(t, d.DeleteTopic("x.a"))
		d.restart()
		require.Equal(t, []string{"x.b"}, d.Topics())
		require.Equal(t, []string{"a/1", "b/1"}, peek(t, d.sub("x.*", "all")))
	})
	t.Run("overflow policies", func(t *testing.T) {
		d := openDur[string](t, broker.StringCodec{})
		drop := d.subscribe("t", "drop", broker.WithMaxQueue(2), broker.WithOverflow(queue.OverflowDropOldest))
		d.subscribe("t", "reject", broker.WithMaxQueue(2), broker.WithOverflow(queue.OverflowReject))
		d.publish("t", "m1")
		d.publish("t", "m2")
		_, err := d.Publish(context.Background(), "t", "m3")
		require.ErrorIs(t, err, queue.ErrQueueFull) // "reject" refuses it, "drop" drops m1
		require.Equal(t, uint64(1), drop.Stats().Dropped)
		d.restart()
		require.Equal(t, []string{"m2/1", "m3/1"}, peek(t, d.sub("t", "drop")))
		require.Equal(t, []string{"m1/1", "m2/1"}, peek(t, d.sub("t", "reject")))
		require.Empty(t, d.DeadLetters())
	})
}

// TestDurableDeadLetterTopic: a subscription's dead-letter topic survives
// a restart, and so does what was routed there, which is not in the store.
func TestDurableDeadLetterTopic(t *testing.T) {
	d := openDur[string](t, broker.StringCodec{})
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
	require.Equal(t, queue.ReasonMaxAttempts.String(), h.Get(vocab.HeaderReason))
	require.Equal(t, "1", h.Get(vocab.HeaderAttempts))
	require.Equal(t, "nacked", h.Get(vocab.HeaderLastError))
	require.Equal(t, "work", h.Get(vocab.HeaderSubscription))
	require.Equal(t, "jobs", h.Get(vocab.HeaderTopic))
	require.Equal(t, a.ID.String(), h.Get(vocab.HeaderMessageID))
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
			require.Equal(t, "lease expired", dv.Headers.Get(vocab.HeaderLastError))
			require.Equal(t, "work", dv.Headers.Get(vocab.HeaderSubscription))
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
		d := openDur[string](t, broker.StringCodec{})
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
			d := openDur[string](t, broker.StringCodec{}, broker.WithCompactMin(1))
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

// TestDurableFanOut: each subscription of a topic keeps its own copy; an
// ack on one does not remove the message from the other.
func TestDurableFanOut(t *testing.T) {
	d := openDur[string](t, broker.StringCodec{})
	a := d.subscribe("t", "a")
	d.subscribe("t", "b")
	d.publish("t", "m1")
	d.publish("t", "m2")
	d.publish("t", "m3")
	require.NoError(t, a.Ack(pollOneDur(t, a).LeaseID))

	d.restart()
	require.Equal(t, 5, d.Recovery().Messages)
	require.Equal(t, []string{"m2/1", "m3/1"}, peek(t, d.sub("t", "a")))
	require.Equal(t, []string{"m1/1", "m2/1", "m3/1"}, peek(t, d.sub("t", "b")))

	// A subscription made after a restart is a new one, and persists.
	d.subscribe("t", "c")
	d.publish("t", "m4")
	d.restart()
	require.Equal(t, 3, d.Recovery().Subscriptions)
	require.Equal(t, []string{"m2/1", "m3/1", "m4/1"}, peek(t, d.sub("t", "a")))
	require.Equal(t, []string{"m1/1", "m2/1", "m3/1", "m4/1"}, peek(t, d.sub("t", "b")))
	require.Equal(t, []string{"m4/1"}, peek(t, d.sub("t", "c")))
}

var (
	errDurEncode = errors.New("test codec: cannot encode")
	errDurDecode = errors.New("test codec: cannot decode")
)

// pickyCodec is StringCodec that refuses to encode or decode one payload.
type pickyCodec struct{ refuseEncode, refuseDecode string }

func (c pickyCodec) Encode(dst []byte, v string) ([]byte, error) {
	if v == c.refuseEncode {
		return dst, errDurEncode
	}
	return append(dst, v...), nil
}

func (c pickyCodec) Decode(data []byte) (string, error) {
	if string(data) == c.refuseDecode {
		return "", errDurDecode
	}
	return string(data), nil
}

func TestOpenErrors(t *testing.T) {
	t.Run("locked", func(t *testing.T) {
		d := openDur[string](t, broker.StringCodec{})
		_, err := broker.Open(d.dir, broker.StringCodec{})
		require.ErrorIs(t, err, broker.ErrLocked)
		_, err = broker.Open(d.dir, broker.JSONCodec[int]{})
		require.ErrorIs(t, err, broker.ErrLocked)
		d.restart() // Close, then Open: the lock is free again
		require.NoError(t, d.CreateTopic("t"))
	})
	t.Run("options of Open only", func(t *testing.T) {
		_, err := broker.New[string](broker.WithSync(broker.SyncNone))
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		_, err = broker.New[string](broker.WithCompactMin(1))
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
	})
	t.Run("invalid arguments", func(t *testing.T) {
		dir := t.TempDir()
		_, err := broker.Open[string](dir, nil)
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		_, err = broker.Open("", broker.StringCodec{})
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		_, err = broker.Open(dir, broker.StringCodec{}, broker.WithSync(broker.SyncMode(9)))
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		_, err = broker.Open(dir, broker.StringCodec{}, broker.WithMaxAttempts(0))
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		b, err := broker.Open(dir, broker.StringCodec{}, broker.WithSync(broker.SyncNone)) // nothing left locked
		require.NoError(t, err)
		require.NoError(t, b.Close())
	})
	t.Run("missing directory is created", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "x", "y")
		b, err := broker.Open(dir, broker.StringCodec{}, broker.WithSync(broker.SyncNone))
		require.NoError(t, err)
		require.NoError(t, b.CreateTopic("t"))
		require.NoError(t, b.Close())
		require.NoError(t, b.Close(), "Close twice")
		b, err = broker.Open(dir, broker.StringCodec{}, broker.WithSync(broker.SyncNone))
		require.NoError(t, err)
		defer b.Close()
		require.Equal(t, []string{"t"}, b.Topics())
	})
	t.Run("broker from New", func(t *testing.T) {
		b, err := broker.New[string]()
		require.NoError(t, err)
		defer b.Close()
		require.Equal(t, broker.RecoveryInfo{}, b.Recovery())
		require.NoError(t, b.Sync())
		require.NoError(t, b.Compact())
	})
	t.Run("after Close", func(t *testing.T) {
		d := openDur[string](t, broker.StringCodec{})
		require.NoError(t, d.Close())
		require.ErrorIs(t, d.Sync(), queue.ErrClosed)
		require.ErrorIs(t, d.Compact(), queue.ErrClosed)
	})
}

// TestDurableCodecErrors: a payload the codec cannot encode is refused
// before anything is stored; one it cannot decode makes Open fail, and
// leaves the directory free for another Open.
func TestDurableCodecErrors(t *testing.T) {
	t.Run("encode", func(t *testing.T) {
		d := openDur[string](t, pickyCodec{refuseEncode: "bad"})
		s := d.subscribe("t", "s")
		_, err := d.Publish(context.Background(), "t", "bad")
		require.ErrorIs(t, err, errDurEncode)
		require.Equal(t, queue.Stats{}, s.Stats())
		d.publish("t", "good") // not sticky
		d.restart()
		s = d.sub("t", "s")
		require.Equal(t, uint64(1), s.Stats().Published)
		require.Equal(t, []string{"good/1"}, peek(t, s))
	})
	t.Run("decode", func(t *testing.T) {
		d := openDur[string](t, broker.StringCodec{})
		d.subscribe("t", "s")
		d.publish("t", "ok")
		d.publish("t", "poison")
		require.NoError(t, d.Close())
		_, err := d.tryOpen(d.mock, pickyCodec{refuseDecode: "poison"})
		require.ErrorIs(t, err, errDurDecode)
		require.ErrorIs(t, err, broker.ErrCorrupt)
		d.open(d.mock)
		require.Equal(t, []string{"ok/1", "poison/1"}, peek(t, d.sub("t", "s")))
	})
	t.Run("empty payloads", func(t *testing.T) {
		d := openDur[[]byte](t, broker.BytesCodec{})
		d.subscribe("t", "s")
		d.publish("t", nil)
		d.publish("t", []byte{})
		d.publish("t", []byte{0, 1, 2})
		d.restart()
		ds := d.sub("t", "s").TryPoll(10)
		require.Len(t, ds, 3)
		require.NotNil(t, ds[0].Payload, "nil comes back empty, not nil")
		require.Empty(t, ds[0].Payload)
		require.NotNil(t, ds[1].Payload)
		require.Empty(t, ds[1].Payload)
		require.Equal(t, []byte{0, 1, 2}, ds[2].Payload)
	})
}

// TestDurableTornTail: a journal whose end is torn (garbage after the last
// record, or its last record cut short) opens with the tail cut off and
// every whole record applied; what comes after is appended where the cut
// was, so it is there after the next restart.
func TestDurableTornTail(t *testing.T) {
	setup := func(t *testing.T) (*durBroker[string], []string) {
		d := openDur[string](t, broker.StringCodec{})
		d.subscribe("t", "s")
		var want []string
		for i := range 10 {
			d.publish("t", fmt.Sprint("m", i))
			want = append(want, fmt.Sprintf("m%d/1", i))
		}
		require.NoError(t, d.Close())
		return d, want
	}
	appendBytes := func(t *testing.T, dir string, b []byte) {
		seg, _ := segFile(t, dir)
		f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = f.Write(b)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	// reopen opens after the damage, checks what is there, then publishes
	// one more and checks it all after another restart.
	reopen := func(t *testing.T, d *durBroker[string], cut int64, want []string) {
		t.Helper()
		d.open(d.mock)
		if cut > 0 {
			require.Equal(t, cut, d.Recovery().TruncatedBytes)
		} else {
			require.Positive(t, d.Recovery().TruncatedBytes)
		}
		require.Equal(t, want, peek(t, d.sub("t", "s")))
		d.publish("t", "after")
		d.restart()
		require.Zero(t, d.Recovery().TruncatedBytes)
		require.Equal(t, append(want, "after/1"), peek(t, d.sub("t", "s")))
	}

	t.Run("garbage", func(t *testing.T) {
		d, want := setup(t)
		appendBytes(t, d.dir, []byte{0xde, 0xad, 0xbe, 0xef, 0x01})
		reopen(t, d, 5, want)
	})
	t.Run("garbage frame", func(t *testing.T) { // a whole frame whose checksum is wrong
		d, want := setup(t)
		appendBytes(t, d.dir, []byte{4, 0, 0, 0, 1, 2, 3, 4, 'b', 'o', 'd', 'y'})
		reopen(t, d, 12, want)
	})
	t.Run("zeros", func(t *testing.T) { // a tail the file system extended but never wrote
		d, want := setup(t)
		appendBytes(t, d.dir, make([]byte, 64))
		reopen(t, d, 64, want)
	})
	t.Run("last record cut", func(t *testing.T) {
		d, want := setup(t)
		seg, size := segFile(t, d.dir)
		require.NoError(t, os.Truncate(seg, size-3))
		reopen(t, d, 0, want[:9]) // the last record was m9's
	})
	t.Run("whole record that cannot be replayed", func(t *testing.T) {
		// Not a torn tail: a frame whose checksum holds but whose body is no
		// record. Open fails rather than cut it, and holds no lock after.
		d, want := setup(t)
		seg, size := segFile(t, d.dir)
		body := []byte{0xff, 1, 2, 3}
		frame := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
		frame = binary.LittleEndian.AppendUint32(frame, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
		appendBytes(t, d.dir, append(frame, body...))
		_, err := d.tryOpen(d.mock, d.codec)
		require.ErrorIs(t, err, broker.ErrCorrupt)
		_, size2 := segFile(t, d.dir)
		require.Equal(t, size+int64(len(frame)+len(body)), size2, "a failed Open leaves the journal as it was")
		require.NoError(t, os.Truncate(seg, size))
		d.open(d.mock)
		require.Equal(t, want, peek(t, d.sub("t", "s")))
	})
}

// TestDurableCompaction: with compaction on, a long history of publishes
// and acks leaves a journal about the size of the live state, and a
// restart (after automatic or explicit compaction) recovers exactly that
// state.
func TestDurableCompaction(t *testing.T) {
	const churn = 600
	// workload builds the same state in d: dead letters (one of a gone
	// subscription), live, delayed and held-back messages, a long churn of
	// publish-poll-ack, and one message in flight. It returns the largest
	// journal size seen during the churn.
	workload := func(t *testing.T, d *durBroker[string], restarts bool) (maxSize int64) {
		s := d.subscribe("t", "s", broker.WithMaxAttempts(3), broker.WithVisibilityTimeout(time.Minute))
		g := d.subscribe("gone", "g")
		d.publish("gone", "g-dead")
		require.NoError(t, g.Reject(pollOneDur(t, g).LeaseID, errors.New("no")))
		require.NoError(t, d.Unsubscribe("gone", "g"))
		d.publish("t", "dead")
		require.NoError(t, s.Reject(pollOneDur(t, s).LeaseID, errors.New("no")))
		for i := range 40 {
			d.publish("t", fmt.Sprintf("live-%02d", i))
		}
		d.publish("t", "delayed", broker.WithDelay(time.Hour))
		d.publish("t", "k-a", broker.WithKey("k"))
		d.publish("t", "k-b", broker.WithKey("k"))
		for i := range churn {
			if restarts && i%200 == 199 { // compaction goes on after a restart
				d.restart()
				s = d.sub("t", "s")
			}
			p := fmt.Sprint("churn-", i)
			d.publish("t", p, broker.WithPriority(queue.PriorityCritical))
			dv := pollOneDur(t, s)
			require.Equal(t, p, dv.Payload)
			require.NoError(t, s.Ack(dv.LeaseID))
			_, size := segFile(t, d.dir)
			maxSize = max(maxSize, size)
		}
		d.publish("t", "inflight", broker.WithPriority(queue.PriorityCritical))
		pollOneDur(t, s)
		return maxSize
	}
	wantLive := []string{"inflight/2"}
	for i := range 40 {
		wantLive = append(wantLive, fmt.Sprintf("live-%02d/1", i))
	}
	wantLive = append(wantLive, "k-a/1")
	check := func(t *testing.T, d *durBroker[string]) {
		t.Helper()
		s := d.sub("t", "s")
		require.Equal(t, wantLive, peek(t, s))
		st := s.Stats()
		require.Equal(t, 1, st.Delayed)
		require.Equal(t, 1, st.HeldBack)
		require.Equal(t, []string{"g-dead", "dead"}, deadPayloads(d.Broker))
		require.Equal(t, []string{"gone", "t"}, d.Topics())
		d.mock.Add(time.Hour)
		later := append(append(slices.Clone(wantLive[:len(wantLive)-1]), "delayed/1"), "k-a/1") // in publish order
		require.Equal(t, later, peek(t, s))
	}

	plain := openDur[string](t, broker.StringCodec{}, broker.WithCompactMin(-1))
	history := workload(t, plain, false)

	d := openDur[string](t, broker.StringCodec{}, broker.WithCompactMin(1))
	maxSize := workload(t, d, true)
	firstSeg, _ := segFile(t, d.dir)
	require.NoError(t, d.Compact())
	seg, snapshot := segFile(t, d.dir)
	require.NotEqual(t, filepath.Base(firstSeg), filepath.Base(seg), "Compact writes a new segment")
	t.Logf("journal: %d bytes without compaction, at most %d with, %d after Compact", history, maxSize, snapshot)
	require.Less(t, maxSize*5, history, "compaction keeps the journal far below the history")
	require.LessOrEqual(t, maxSize, 4*snapshot, "compaction keeps the journal within a few times the live state")
	require.NotEqual(t, "seg-00000001.log", filepath.Base(firstSeg), "compacted by itself")

	d.restart()
	require.Equal(t, broker.RecoveryInfo{Records: d.Recovery().Records, Topics: 2, Subscriptions: 1, Messages: 44, DeadLetters: 2}, d.Recovery())
	check(t, d)

	// The journal without compaction recovers the same state.
	plain.restart()
	check(t, plain)
}

// TestDurableCompactMinOptionReused: an Option value given to Open again
// (the same options for every Open of a program that restarts its broker)
// means the same thing every time.
func TestDurableCompactMinOptionReused(t *testing.T) {
	never := broker.WithCompactMin(-1)
	d := openDur[string](t, broker.StringCodec{}, never)
	s := d.subscribe("t", "s")
	cycle := func() {
		for range 50 {
			d.publish("t", "m")
			require.NoError(t, s.Ack(pollOneDur(t, s).LeaseID))
		}
	}
	cycle()
	d.restart() // Open with the same Option value
	s = d.sub("t", "s")
	cycle()
	seg, _ := segFile(t, d.dir)
	require.Equal(t, "seg-00000001.log", filepath.Base(seg), "compaction is off")
}

// TestDurableConcurrent: publishers and consumers at once on a durable
// broker that fsyncs every call (sharing fsyncs) and compacts as it goes:
// after a restart, exactly the messages not acked are there.
func TestDurableConcurrent(t *testing.T) {
	const publishers, each, acks = 4, 50, 100
	d := openDur[string](t, broker.StringCodec{}, broker.WithSync(broker.SyncAlways), broker.WithCompactMin(4096))
	s := d.subscribe("t", "s")
	pctx, stop := context.WithCancel(context.Background())
	defer stop()
	var claimed atomic.Int64
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, publishers+2)
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				if _, err := d.Publish(context.Background(), "t", fmt.Sprintf("p%d-%02d", p, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for {
				ds, err := s.Poll(pctx, 4)
				if err != nil {
					return // done: acks reached
				}
				for _, dv := range ds {
					if claimed.Add(1) > acks {
						if err := s.Release(dv.LeaseID); err != nil {
							errs <- err
						}
						continue
					}
					if err := s.Ack(dv.LeaseID); err != nil {
						errs <- err
						continue
					}
					mu.Lock()
					acked[dv.Payload] = true
					n := len(acked)
					mu.Unlock()
					if n == acks {
						stop()
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, acked, acks)
	seg, _ := segFile(t, d.dir)
	require.NotEqual(t, "seg-00000001.log", filepath.Base(seg), "compacted while it ran")

	d.restart()
	var want []string
	for p := range publishers {
		for i := range each {
			if p := fmt.Sprintf("p%d-%02d", p, i); !acked[p] {
				want = append(want, p+"/1")
			}
		}
	}
	got := peek(t, d.sub("t", "s"))
	require.ElementsMatch(t, want, got)
	require.Equal(t, publishers*each-acks, d.Recovery().Messages)
}

// TestDurableSyncModes: both modes recover everything after a Close.
func TestDurableSyncModes(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncAlways, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			d := openDur[string](t, broker.StringCodec{}, broker.WithSync(mode))
			s := d.subscribe("t", "s")
			for _, p := range []string{"a", "b", "c", "d", "e"} {
				d.publish("t", p)
			}
			ds := s.TryPoll(3)
			require.Equal(t, []string{"a", "b", "c"}, payloads(ds))
			require.NoError(t, s.Ack(ds[0].LeaseID))
			require.NoError(t, s.Nack(ds[1].LeaseID, time.Minute))
			require.NoError(t, s.Release(ds[2].LeaseID))
			require.NoError(t, d.Sync())
			d.restart()
			s = d.sub("t", "s")
			require.Equal(t, []string{"c/1", "d/1", "e/1"}, peek(t, s))
			d.mock.Add(time.Minute)
			require.Equal(t, []string{"b/2", "c/1", "d/1", "e/1"}, peek(t, s))
		})
	}
}

// Dedup IDs survive a restart inside their window: a job that publishes
// its input again after a crash, with an ID per item, queues nothing twice
// (acked items included), and past the window an ID is new again.
func TestDurableDedupAcrossRestart(t *testing.T) {
	d := openDur(t, broker.StringCodec{}, broker.WithDedupWindow(time.Hour), broker.WithCompactMin(1))
	s := d.subscribe("jobs", "w")
	first := make([]queue.Message[string], 3)
	for i := range first {
		first[i] = d.publish("jobs", fmt.Sprint("item ", i), broker.WithDedupID(fmt.Sprint("line-", i)))
	}
	require.NoError(t, s.Ack(pollOneDur(t, s).LeaseID)) // item 0 done before the crash
	d.restart()
	s = d.subscribe("jobs", "w")

	d.mock.Add(59 * time.Minute)
	for i := range first { // the job starts over from its input
		m := d.publish("jobs", fmt.Sprint("item ", i), broker.WithDedupID(fmt.Sprint("line-", i)))
		require.Equal(t, first[i].ID, m.ID, "line-%d is the message published before the restart", i)
	}
	require.Equal(t, uint64(2), s.Stats().Published, "the two recovered messages, and no new one")
	ds := s.TryPoll(10)
	require.Len(t, ds, 2)
	require.Equal(t, first[1].ID, ds[0].ID)
	require.Equal(t, first[2].ID, ds[1].ID)

	d.restart() // and again: the window counts from the first publish
	d.mock.Add(time.Minute)
	m := d.publish("jobs", "item 0 again", broker.WithDedupID("line-0"))
	require.NotEqual(t, first[0].ID, m.ID, "past the window the ID is new")
}
