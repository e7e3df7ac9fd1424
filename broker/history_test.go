package broker_test

// A dead letter's attempt history: each attempt that did not end in an
// ack, with when, how, its error and how long its lease was held.

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

// failThreeWays takes the one message s holds through a failure, an
// expired lease, a release and a last failure, moving the clock from
// start, and returns the history a dead letter of it must have.
func failThreeWays(t *testing.T, s *broker.Subscription[string], mock interface{ Add(time.Duration) }, start time.Time) []queue.Attempt {
	t.Helper()
	poll := func() queue.Delivery[string] {
		t.Helper()
		ds := s.TryPoll(1)
		require.Len(t, ds, 1)
		return ds[0]
	}
	d := poll()
	mock.Add(2 * time.Second)
	require.NoError(t, s.Fail(d.LeaseID, errors.New("card declined")))
	hs, err := s.Peek(queue.PeekQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Len(t, hs[0].History, 1, "a held message shows its history")

	poll()
	mock.Add(10 * time.Second) // the lease (10s) expires
	d = poll()
	mock.Add(time.Second)
	require.NoError(t, s.Release(d.LeaseID))
	d = poll()
	mock.Add(3 * time.Second)
	require.NoError(t, s.Fail(d.LeaseID, errors.New("timeout")))
	at := func(secs int) time.Time { return start.Add(time.Duration(secs) * time.Second) }
	return []queue.Attempt{
		{Attempt: 1, Outcome: queue.AttemptFailed, At: at(2), Held: 2 * time.Second, Error: "card declined"},
		{Attempt: 2, Outcome: queue.AttemptExpired, At: at(12), Held: 10 * time.Second},
		{Attempt: 3, Outcome: queue.AttemptReleased, At: at(13), Held: time.Second},
		{Attempt: 3, Outcome: queue.AttemptFailed, At: at(16), Held: 3 * time.Second, Error: "timeout"},
	}
}

func TestDeadLetterKeepsEveryAttempt(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(
		broker.WithMaxAttempts(3), broker.WithVisibilityTimeout(10*time.Second), broker.WithRetry(queue.RetryPolicy{NoBackoff: true})))
	s := brokertest.Subscribe(t, b, "t", "s")
	brokertest.Publish(t, b, "t", "ok", "doomed")
	ok := s.TryPoll(1)
	require.NoError(t, s.Ack(ok[0].LeaseID))

	want := failThreeWays(t, s, mock, brokertest.Epoch)
	dls := b.DeadLetters()
	require.Len(t, dls, 1)
	assert.Equal(t, want, dls[0].History)
	assert.Equal(t, 3, dls[0].Attempts)

	// A redrive carries the history on: a second death adds to it.
	n, err := b.Redrive(func(queue.DeadLetter[string]) bool { return true })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	d := s.TryPoll(1)
	require.NoError(t, s.Reject(d[0].LeaseID, errors.New("gave up")))
	dls = b.DeadLetters()
	require.Len(t, dls, 1)
	require.Len(t, dls[0].History, 5)
	assert.Equal(t, queue.AttemptRejected, dls[0].History[4].Outcome)
	assert.Equal(t, "gave up", dls[0].History[4].Error)
}

func TestHistoryIsBounded(t *testing.T) {
	b, _ := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithMaxAttempts(queue.UnlimitedAttempts)))
	s := brokertest.Subscribe(t, b, "t", "s")
	brokertest.Publish(t, b, "t", "x")
	long := string(make([]byte, 3*queue.MaxHistoryError))
	for range 12 {
		d := s.TryPoll(1)
		require.Len(t, d, 1)
		require.NoError(t, s.FailAfter(d[0].LeaseID, 0, errors.New(long)))
	}
	hs, err := s.Peek(queue.PeekQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, hs[0].History, queue.MaxHistory)
	assert.Equal(t, 3, hs[0].History[0].Attempt, "the latest are kept")
	assert.LessOrEqual(t, len(hs[0].History[0].Error), queue.MaxHistoryError)
	assert.Equal(t, 3*queue.MaxHistoryError, len(hs[0].LastError), "the last error keeps its own bound (4 KiB)")
}

func TestHistorySurvivesRestartAndCompaction(t *testing.T) {
	for _, compact := range []bool{false, true} {
		d := openDur(t, queue.StringCodec(), broker.WithSubscriptionDefaults(
			broker.WithMaxAttempts(3), broker.WithVisibilityTimeout(10*time.Second), broker.WithRetry(queue.RetryPolicy{NoBackoff: true})))
		s := d.subscribe("t", "s")
		d.publish("t", "doomed")
		want := failThreeWays(t, s, d.mock, durEpoch)
		if compact {
			require.NoError(t, d.Compact())
		}
		d.restart()
		dls := d.DeadLetters()
		require.Len(t, dls, 1, "compact=%v", compact)
		got := slices.Clone(dls[0].History) // read-only: the store's
		for i := range got {
			got[i].At = got[i].At.UTC() // a journal keeps the instant, not the zone
		}
		assert.Equal(t, want, got, "compact=%v", compact)
	}
}
