package broker_test

// What an operator does to one held message: delete it, make a delayed
// one visible now, edit its payload.

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

func TestDeleteMessageInEveryState(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	other := brokertest.Subscribe(t, b, "t", "other")
	leased := brokertest.Publish(t, b, "t", "leased")[0]
	ds := s.TryPoll(1)
	require.Len(t, ds, 1)
	visible := brokertest.Publish(t, b, "t", "visible")[0]
	delayed, err := b.Publish(ctx, "t", "delayed", broker.WithDelay(time.Hour))
	require.NoError(t, err)
	k1, err := b.Publish(ctx, "t", "k1", broker.WithKey("k"))
	require.NoError(t, err)
	k2, err := b.Publish(ctx, "t", "k2", broker.WithKey("k")) // held back behind k1
	require.NoError(t, err)
	k3, err := b.Publish(ctx, "t", "k3", broker.WithKey("k"))
	require.NoError(t, err)

	for _, id := range []uuid.UUID{visible.ID, delayed.ID, k2.ID, leased.ID} {
		n, err := s.DeleteMessages(id)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		n, err = s.DeleteMessages(id)
		assert.ErrorIs(t, err, queue.ErrMessageNotFound, "twice")
		assert.Equal(t, 0, n)
		balanced(t, s.Stats())
	}
	assert.ErrorIs(t, s.Ack(ds[0].LeaseID), queue.ErrLeaseNotFound, "the deleted lease's Ack")
	st := s.Stats()
	assert.Equal(t, uint64(4), st.Dropped)
	assert.Equal(t, 1, st.Visible)
	assert.Equal(t, 1, st.HeldBack, "k3 behind k1")

	// k1 goes: k3 gets its turn.
	unknown := uuid.New()
	n, err := s.DeleteMessages(k1.ID, unknown)
	assert.Equal(t, 1, n, "the one it holds goes")
	assert.ErrorIs(t, err, queue.ErrMessageNotFound)
	assert.ErrorContains(t, err, unknown.String())
	got := s.TryPoll(10)
	require.Len(t, got, 1)
	assert.Equal(t, k3.ID, got[0].ID)
	assert.Equal(t, 6, other.Stats().Visible+other.Stats().Delayed+other.Stats().HeldBack, "the other subscription keeps its copies")
	require.NoError(t, b.Close())
	_, err = s.DeleteMessages(k3.ID)
	assert.ErrorIs(t, err, queue.ErrClosed)
}

func TestMakeVisible(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(
		broker.WithRetry(queue.RetryPolicy{Initial: time.Minute}), broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s")
	first := brokertest.Publish(t, b, "t", "first")[0]
	later, err := b.Publish(ctx, "t", "later", broker.WithDelay(time.Hour))
	require.NoError(t, err)
	_, err = b.Publish(ctx, "t", "k1", broker.WithKey("k"))
	require.NoError(t, err)
	k2, err := b.Publish(ctx, "t", "k2", broker.WithKey("k"))
	require.NoError(t, err)

	ds := s.TryPoll(2) // first, k1
	require.Len(t, ds, 2)
	n, err := s.MakeVisible(first.ID, k2.ID)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument, "in flight, held back")
	assert.Equal(t, 0, n)
	require.NoError(t, s.Fail(ds[0].LeaseID, errors.New("boom"))) // backs off a minute
	require.NoError(t, s.Ack(ds[1].LeaseID))
	assert.Empty(t, s.TryPoll(10)[1:], "k2 alone is visible")

	n, err = s.MakeVisible(later.ID, first.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	n, err = s.MakeVisible(first.ID)
	require.NoError(t, err, "visible already: nothing to do")
	assert.Equal(t, 0, n)
	got := s.TryPoll(10)
	require.Len(t, got, 2, "no clock moved")
	assert.Equal(t, []uuid.UUID{first.ID, later.ID}, []uuid.UUID{got[0].ID, got[1].ID}, "each in its place")
	assert.Equal(t, 2, got[0].Attempt, "the retry's attempt count goes on")
	balanced(t, s.Stats())
	mock.Add(2 * time.Hour)
	_, err = s.MakeVisible(uuid.New())
	assert.ErrorIs(t, err, queue.ErrMessageNotFound)
}

func TestEditPayloadChangesOneSubscriptionsCopy(t *testing.T) {
	b, _ := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithRetry(queue.RetryPolicy{NoBackoff: true})))
	a := brokertest.Subscribe(t, b, "t", "a")
	other := brokertest.Subscribe(t, b, "t", "b")
	m, err := b.Publish(ctx, "t", "v1", broker.WithKey("k"), broker.WithHeaders(map[string]string{"h": "x"}))
	require.NoError(t, err)

	ds := a.TryPoll(1)
	require.Len(t, ds, 1)
	require.NoError(t, a.EditPayload(m.ID, "v2"))
	assert.Equal(t, "v1", ds[0].Payload, "the delivery in flight keeps its payload")
	require.NoError(t, a.Nack(ds[0].LeaseID, 0))
	again := a.TryPoll(1)
	require.Len(t, again, 1)
	assert.Equal(t, "v2", again[0].Payload)
	assert.Equal(t, m.ID, again[0].ID)
	assert.Equal(t, 2, again[0].Attempt)
	assert.Equal(t, "k", again[0].Key)
	assert.Equal(t, "x", again[0].Headers.Get("h"))

	od := other.TryPoll(1)
	require.Len(t, od, 1)
	assert.Equal(t, "v1", od[0].Payload, "the other subscription's copy")
	assert.ErrorIs(t, a.EditPayload(uuid.New(), "v3"), queue.ErrMessageNotFound)
}

// A durable broker records each action: after a restart, and after a
// compaction, the subscription holds what it held after the actions.
func TestHeldMessageActionsSurviveRestartAndCompaction(t *testing.T) {
	for _, compact := range []bool{false, true} {
		d := openDur(t, queue.StringCodec())
		s := d.subscribe("t", "s")
		d.subscribe("t", "other")
		gone := d.publish("t", "gone")
		edited := d.publish("t", "v1")
		delayed := d.publish("t", "delayed", broker.WithDelay(time.Hour))
		_, err := s.DeleteMessages(gone.ID)
		require.NoError(t, err)
		require.NoError(t, s.EditPayload(edited.ID, "v2"))
		_, err = s.MakeVisible(delayed.ID)
		require.NoError(t, err)
		if compact {
			require.NoError(t, d.Compact())
		}
		d.restart()
		s = d.sub("t", "s")
		got := s.TryPoll(10)
		require.Len(t, got, 2, "compact=%v", compact)
		assert.Equal(t, []string{"v2", "delayed"}, []string{got[0].Payload, got[1].Payload}, "compact=%v", compact)
		assert.Equal(t, edited.ID, got[0].ID)
		od := d.sub("t", "other").TryPoll(10)
		require.Len(t, od, 2, "the other subscription's copies: compact=%v", compact)
		assert.Equal(t, []string{"gone", "v1"}, []string{od[0].Payload, od[1].Payload})
	}
}
