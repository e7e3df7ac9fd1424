package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

func TestPublishBatch(t *testing.T) {
	ctx := context.Background()
	mock := clock.NewMock()
	b, err := broker.New[string](broker.WithClock(mock))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	s, err := b.Subscribe("t", "s")
	require.NoError(t, err)

	ms, err := b.PublishBatch(ctx, "t", []string{"a", "b", "c"}, broker.WithPriority(queue.PriorityHigh), broker.WithKey(""))
	require.NoError(t, err)
	require.Len(t, ms, 3)
	ds := s.TryPoll(10)
	require.Len(t, ds, 3)
	for i, d := range ds {
		require.Equal(t, ms[i].ID, d.ID, "delivered in the batch's order")
		require.Equal(t, []string{"a", "b", "c"}[i], d.Payload)
		require.Equal(t, queue.PriorityHigh, d.Priority)
		require.True(t, d.PublishedAt.Equal(mock.Now()), "one clock read for the batch")
	}
	require.NotEqual(t, ms[0].ID, ms[1].ID)

	// Edges: empty, nil context, dedup, missing topic, after Close.
	ms, err = b.PublishBatch(ctx, "t", nil)
	require.NoError(t, err)
	require.Nil(t, ms)
	//lint:ignore SA1012 a nil context is the invalid input under test
	_, err = b.PublishBatch(nil, "t", []string{"x"})
	require.ErrorIs(t, err, queue.ErrInvalidArgument)
	_, err = b.PublishBatch(ctx, "t", []string{"x"}, broker.WithDedupID("d"))
	require.ErrorIs(t, err, queue.ErrInvalidArgument)
	_, err = b.PublishBatch(ctx, "missing", []string{"x"})
	require.ErrorIs(t, err, broker.ErrTopicNotFound)
	_, err = b.PublishBatch(ctx, "t", []string{"x"}, broker.WithDelay(-time.Second))
	require.ErrorIs(t, err, queue.ErrInvalidArgument)
	require.Zero(t, s.Stats().Visible, "a refused batch stores nothing")
	require.NoError(t, b.Close())
	_, err = b.PublishBatch(ctx, "t", []string{"x"})
	require.ErrorIs(t, err, queue.ErrClosed)
}

// A subscription that refuses some of a batch: the others are stored, the
// error names each refusal, and every message is returned.
func TestPublishBatchPartialRefusal(t *testing.T) {
	b, err := broker.New[int]()
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	s, err := b.Subscribe("t", "small", broker.WithMaxQueue(2), broker.WithOverflow(queue.OverflowReject))
	require.NoError(t, err)
	ms, err := b.PublishBatch(context.Background(), "t", []int{1, 2, 3, 4})
	require.ErrorIs(t, err, queue.ErrQueueFull)
	require.ErrorContains(t, err, "message 2")
	require.ErrorContains(t, err, "message 3")
	require.Len(t, ms, 4)
	st := s.Stats()
	require.Equal(t, uint64(2), st.Published)
	require.Equal(t, uint64(2), st.Rejected)
}

// On a durable broker a batch is one wait for the disk, and it survives a
// restart whole.
func TestPublishBatchDurable(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b, err := broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("t"))
	_, err = b.Subscribe("t", "s")
	require.NoError(t, err)
	payloads := make([]string, 500)
	for i := range payloads {
		payloads[i] = string(rune('a' + i%26))
	}
	ms, err := b.PublishBatch(ctx, "t", payloads)
	require.NoError(t, err)
	require.NoError(t, b.Close())

	b, err = broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	s, err := b.Subscribe("t", "s")
	require.NoError(t, err)
	ds := s.TryPoll(1000)
	require.Len(t, ds, len(ms))
	for i, d := range ds {
		require.Equal(t, ms[i].ID, d.ID)
		require.Equal(t, payloads[i], d.Payload)
	}
}

// TestPublishBatchDedupIDs: each payload of a batch can carry its dedup ID;
// duplicates (of earlier publishes, or earlier in the batch) return the
// original in their place and queue nothing.
func TestPublishBatchDedupIDs(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	first, err := b.Publish(ctx, "t", "one", broker.WithDedupID("1"))
	require.NoError(t, err)
	ms, err := b.PublishBatch(ctx, "t", []string{"one again", "two", "two again", "three"},
		broker.WithDedupIDs([]string{"1", "2", "2", "3"}))
	require.NoError(t, err)
	require.Equal(t, first, ms[0]) // a duplicate of a message still held: the original
	require.Equal(t, ms[1], ms[2])
	require.Equal(t, []string{"one", "two", "two", "three"}, []string{ms[0].Payload, ms[1].Payload, ms[2].Payload, ms[3].Payload})
	require.Equal(t, 3, s.Stats().Visible)

	for _, tc := range []struct {
		name string
		ids  []string
	}{
		{"too few", []string{"x"}},
		{"too many", []string{"x", "y", "z"}},
		{"empty", []string{"x", ""}},
		{"too long", []string{"x", strings.Repeat("i", broker.MaxDedupID+1)}},
	} {
		_, err := b.PublishBatch(ctx, "t", []string{"p", "q"}, broker.WithDedupIDs(tc.ids))
		require.ErrorIs(t, err, queue.ErrInvalidArgument, tc.name)
	}
	require.Equal(t, 3, s.Stats().Visible, "invalid batches publish nothing")
	_, err = b.Publish(ctx, "t", "p", broker.WithDedupIDs([]string{"x"}))
	require.ErrorIs(t, err, queue.ErrInvalidArgument)
}

// A batch whose message no subscription takes (its filter drops it) still
// remembers the message's ID, and a second use of the ID in the same batch
// is a duplicate of it: it must not wait for the batch's own pending ID.
func TestDurablePublishBatchRepeatedIDOfAFilteredMessage(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	d.subscribe("t", "s", broker.WithFilter(func(m queue.Message[string]) bool { return m.Payload != "skip" }))
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang guard, not a wait
	defer cancel()
	ms, err := d.PublishBatch(c, "t", []string{"skip", "skip again"}, broker.WithDedupIDs([]string{"a", "a"}))
	require.NoError(t, err)
	require.Equal(t, ms[0].ID, ms[1].ID, "the second is a duplicate of the first")
}
