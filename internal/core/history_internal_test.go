package core

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/queue"
)

// A message that fails again and again shows its latest MaxHistory
// attempts, each with its own text, in order; the queue keeps the texts
// of those alone (and a few the next compaction drops), and none once the
// message is gone.
func TestHistoryKeepsTheLatestTextsAndForgetsTheRest(t *testing.T) {
	mock := clock.NewMock()
	q, err := New[int](queue.Config{Clock: mock, VisibilityTimeout: time.Minute, MaxAttempts: queue.UnlimitedAttempts,
		Retry: queue.RetryPolicy{NoBackoff: true}}, nil)
	require.NoError(t, err)
	defer q.Close()
	require.NoError(t, q.Offer(t.Context(), &queue.Message[int]{Payload: 1}, 0))
	const n = 37
	for i := 1; i <= n; i++ {
		ds := q.TryPoll(1)
		require.Len(t, ds, 1)
		mock.Add(time.Second)
		var cause error // every third fails without a cause: "failed", kept as no text of its own
		if i%3 != 0 {
			cause = fmt.Errorf("boom %d", i)
		}
		require.NoError(t, q.Fail(ds[0].LeaseID, cause))
		q.mu.Lock()
		kept := len(q.histText)
		q.mu.Unlock()
		assert.LessOrEqual(t, kept, 16, "texts kept after %d failures", i)
	}
	hs, err := q.Peek(queue.PeekQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, hs, 1)
	h := hs[0].History
	require.Len(t, h, queue.MaxHistory)
	for j, a := range h {
		i := n - queue.MaxHistory + 1 + j
		want := "failed"
		if i%3 != 0 {
			want = fmt.Sprintf("boom %d", i)
		}
		assert.Equal(t, i, a.Attempt)
		assert.Equal(t, want, a.Error, "attempt %d", i)
		assert.Equal(t, queue.AttemptFailed, a.Outcome)
		assert.Equal(t, time.Second, a.Held)
		assert.True(t, a.At.Equal(clock.NewMock().Now().Add(time.Duration(i)*time.Second)), "attempt %d at %v", i, a.At)
	}

	ds := q.TryPoll(1)
	require.NoError(t, q.Ack(ds[0].LeaseID))
	q.mu.Lock()
	defer q.mu.Unlock()
	assert.Empty(t, q.histText, "the texts of a message gone")
}

// A message on its last attempt that fails is dead-lettered with its
// latest attempts; a redrive carries them on, texts and all.
func TestHistoryGoesWithTheLetterAndComesBack(t *testing.T) {
	mock := clock.NewMock()
	var letters []Letter[int]
	q, err := New[int](queue.Config{Clock: mock, VisibilityTimeout: time.Minute, MaxAttempts: 2,
		Retry: queue.RetryPolicy{NoBackoff: true}}, func(l Letter[int]) { letters = append(letters, l) })
	require.NoError(t, err)
	defer q.Close()
	require.NoError(t, q.Offer(t.Context(), &queue.Message[int]{Payload: 1}, 0))
	require.Len(t, q.TryPoll(1), 1)
	mock.Add(time.Minute) // expires
	ds := q.TryPoll(1)
	require.Len(t, ds, 1)
	require.NoError(t, q.Reject(ds[0].LeaseID, errors.New("poison")))
	require.Len(t, letters, 1)
	want := []queue.Attempt{
		{Attempt: 1, Outcome: queue.AttemptExpired, At: mock.Now(), Held: time.Minute},
		{Attempt: 2, Outcome: queue.AttemptRejected, At: mock.Now(), Error: "poison"},
	}
	assert.Equal(t, want, letters[0].History)
	q.mu.Lock()
	assert.Empty(t, q.histText, "the texts of a message dead-lettered")
	q.mu.Unlock()

	err = q.Redrive(letters[0])
	require.NoError(t, err)
	hs, err := q.Peek(queue.PeekQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, want, hs[0].History)
}
