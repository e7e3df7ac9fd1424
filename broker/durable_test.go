package broker_test

// Behaviour tests of the durable broker (broker.Open), through the public
// API only. A restart here is Close, then Open of the same directory on a
// new mock clock set to the old one's time (or later); crashes are
// crash_test.go's. This file holds the helpers and what a restart brings
// back; durable_*_test.go hold the rest, by concept.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
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
	codec queue.Codec[T]
	opts  []broker.Option
	mock  *clock.Mock
}

// openDur opens a durable broker (SyncNone unless opts say otherwise) in a
// new directory, on a mock clock set to durEpoch.
func openDur[T any](t *testing.T, codec queue.Codec[T], opts ...broker.Option) *durBroker[T] {
	t.Helper()
	return openDurAt(t, durEpoch, codec, opts...)
}

func openDurAt[T any](t *testing.T, start time.Time, codec queue.Codec[T], opts ...broker.Option) *durBroker[T] {
	t.Helper()
	d := &durBroker[T]{t: t, dir: t.TempDir(), codec: codec, opts: opts}
	mock := clock.NewMock()
	mock.Set(start)
	d.open(mock)
	return d
}

// tryOpen opens d's directory with codec on mock; the broker is closed
// when the test ends.
func (d *durBroker[T]) tryOpen(mock *clock.Mock, codec queue.Codec[T]) (*broker.Broker[T], error) {
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
	Sub, Topic, ID, Payload, LastError string
	Reason                             queue.Reason
	Attempts                           int
	At                                 int64
}

func deadLettersOf[T any](b *broker.Broker[T]) []durDead {
	var out []durDead
	for _, dl := range b.DeadLetters() {
		out = append(out, durDead{dl.Subscription, dl.Topic, dl.Message.ID.String(), fmt.Sprint(dl.Message.Payload), dl.LastError,
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
			d := openDurAt(t, start, queue.JSONCodec[durOrder]())
			require.NoError(t, d.CreateTopic("orders"))
			require.NoError(t, d.CreateTopic("audit"))
			s := d.subscribe("orders", "billing", broker.WithMaxAttempts(7), broker.WithVisibilityTimeout(45*time.Second),
				broker.WithRetry(queue.RetryPolicy{Initial: 3 * time.Second, Max: 40 * time.Second, Multiplier: 3}),
				broker.WithMaxQueue(1000), broker.WithMaxInFlight(50), broker.WithDefaultTTL(2*time.Hour))
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
			age := d.mock.Now().Sub(m1.PublishedAt)                                         // m1 is the oldest visible
			require.Equal(t, queue.Stats{Published: 9, Delivered: 1, Acked: 1, Visible: 6, Delayed: 1, HeldBack: 1, OldestVisibleAge: age}, s.Stats())

			d.restart()
			rec := d.Recovery()
			require.Positive(t, rec.Records)
			require.Equal(t, broker.RecoveryInfo{Records: rec.Records, Topics: 2, Subscriptions: 1, Messages: 8}, rec)
			require.Equal(t, []string{"audit", "orders"}, d.Topics())
			s = d.sub("orders", "billing")
			gotCfg := s.Config()
			wantCfg.Clock, gotCfg.Clock = nil, nil
			require.Equal(t, wantCfg, gotCfg, "the subscription's options")
			require.Equal(t, queue.Stats{Published: 8, Visible: 6, Delayed: 1, HeldBack: 1, OldestVisibleAge: age}, s.Stats(),
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
		d := openDur[string](t, queue.StringCodec())
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
		require.Equal(t, []durDead{{"s", "t", m.ID.String(), "a", "", queue.ReasonExpired, 0, d.mock.Now().UnixNano()}}, deadLettersOf(d.Broker))
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
		d := openDur[string](t, queue.StringCodec())
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
		require.Equal(t, []durDead{{"s", "t", m.ID.String(), "a", "lease expired", queue.ReasonMaxAttempts, 3, d.mock.Now().UnixNano()}},
			deadLettersOf(d.Broker))
		require.Empty(t, s.TryPoll(1))
		st := s.Stats()
		require.Equal(t, queue.Stats{Published: 1, DeadLettered: 1, DeadLetteredBy: queue.DeadLetterCounts{MaxAttempts: 1}}, st)
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

// Dedup IDs survive a restart inside their window: a job that publishes
// its input again after a crash, with an ID per item, queues nothing twice
// (acked items included), and past the window an ID is new again.
func TestDurableDedupAcrossRestart(t *testing.T) {
	d := openDur(t, queue.StringCodec(), broker.WithDedupWindow(time.Hour), broker.WithCompactMin(1))
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
