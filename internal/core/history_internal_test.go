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

// A letter from elsewhere may hold more attempts than MaxHistory: a
// redrive keeps its latest MaxHistory, the ones a caller would see, and the
// next failures go on from them.
func TestRedriveOfALongHistoryKeepsItsLatest(t *testing.T) {
	mock := clock.NewMock()
	q, err := New[int](queue.Config{Clock: mock, VisibilityTimeout: time.Minute, MaxAttempts: queue.UnlimitedAttempts,
		Retry: queue.RetryPolicy{NoBackoff: true}}, nil)
	require.NoError(t, err)
	defer q.Close()
	long := make([]queue.Attempt, 300)
	for i := range long {
		long[i] = queue.Attempt{Attempt: i + 1, Outcome: queue.AttemptFailed, At: mock.Now(), Error: fmt.Sprint("boom ", i+1)}
	}
	require.NoError(t, q.Redrive(Letter[int]{DeadLetter: queue.DeadLetter[int]{Message: queue.Message[int]{Payload: 1}, History: long}}))
	hs, err := q.Peek(queue.PeekQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, long[len(long)-queue.MaxHistory:], hs[0].History)

	ds := q.TryPoll(1)
	require.Len(t, ds, 1)
	require.NoError(t, q.Fail(ds[0].LeaseID, errors.New("again")))
	hs, err = q.Peek(queue.PeekQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, hs[0].History, queue.MaxHistory)
	assert.Equal(t, long[len(long)-queue.MaxHistory+1:], hs[0].History[:queue.MaxHistory-1])
	assert.Equal(t, "again", hs[0].History[queue.MaxHistory-1].Error)
	q.mu.Lock()
	assert.Len(t, q.histText, queue.MaxHistory, "the texts of the attempts it keeps")
	q.mu.Unlock()
}

// The arena never cuts a region twice: what a dead letter viewed of a
// released region stays as it was while later regions are cut, written
// and released; a chunk whose regions are all released is let go, other
// than the open one, and its index serves a new chunk.
func TestHistArenaNeverCutsARegionAgain(t *testing.T) {
	var a histArena
	type region struct {
		ref  histRef
		view []attemptRec
		mark int32
	}
	var live, letters []region
	mark := int32(0)
	write := func(h region) {
		for i := range h.view {
			h.view[i] = attemptRec{attempt: h.mark, end: tick(i)}
		}
	}
	check := func(h region) {
		for i, r := range h.view {
			require.Equal(t, attemptRec{attempt: h.mark, end: tick(i)}, r, "region %x, record %d", h.ref, i)
		}
	}
	for round := range 40 {
		for i := range 100 {
			c := []int{1, 4, 16, 10, 40}[(round+i)%5]
			mark++
			ref := a.cut(c).withLen(c)
			h := region{ref, a.recs(ref), mark}
			require.Len(t, h.view, c)
			write(h)
			live = append(live, h)
		}
		// Release most of them, oldest first, and every tenth round all
		// of them; the letters keep their views.
		keep := 20
		if round%10 == 9 {
			keep = 0
		}
		for len(live) > keep {
			h := live[0]
			live = live[1:]
			a.release(h.ref)
			if h.mark%7 == 0 {
				letters = append(letters, h)
			}
		}
		for _, h := range live {
			check(h)
		}
		for _, h := range letters {
			check(h)
		}
	}
	kept := 0
	for i, ch := range a.chunks {
		if ch != nil {
			kept++
			assert.True(t, a.live[i] > 0 || i == a.open, "chunk %d held with no region", i)
		}
	}
	assert.LessOrEqual(t, kept, 6, "chunks held for 20 regions of at most 40 records")
	assert.Less(t, len(a.chunks), 20, "indices of chunks let go are used again")
	for _, h := range live {
		a.release(h.ref)
	}
	a.cut(histChunkLen) // opens a new chunk: the one before goes too
	kept = 0
	for _, ch := range a.chunks {
		if ch != nil {
			kept++
		}
	}
	assert.Equal(t, 1, kept)
}
