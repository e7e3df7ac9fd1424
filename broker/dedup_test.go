package broker_test

// Publish deduplication: a dedup ID inside its window returns the original
// message and queues nothing.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

func TestPublishDedup(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithDedupWindow(time.Minute))
	s := brokertest.Subscribe(t, b, "t", "s")
	first, err := b.Publish(ctx, "t", "charge #1", broker.WithDedupID("order-1"))
	require.NoError(t, err)
	mock.Add(time.Minute - time.Nanosecond)
	again, err := b.Publish(ctx, "t", "charge #1 (retry)", broker.WithDedupID("order-1"))
	require.NoError(t, err)
	assert.Equal(t, first, again, "a duplicate of a message still held returns the original message")
	assert.Equal(t, uint64(1), s.Stats().Published)

	mock.Add(time.Nanosecond) // the window is fixed from the first publish
	later, err := b.Publish(ctx, "t", "charge #1 (much later)", broker.WithDedupID("order-1"))
	require.NoError(t, err)
	assert.NotEqual(t, first.ID, later.ID)
	assert.Equal(t, uint64(2), s.Stats().Published)

	require.NoError(t, b.CreateTopic("other"))
	brokertest.Subscribe(t, b, "other", "s")
	_, err = b.Publish(ctx, "other", "x", broker.WithDedupID("order-1"))
	require.NoError(t, err)
	_, err = b.Publish(ctx, "t", "x", broker.WithDedupID(""))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}

func TestPublishDedupFailedPublishRecordsNothing(t *testing.T) {
	b, _ := brokertest.New[int](t, broker.WithDedupLimit(2))
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject))
	brokertest.Publish(t, b, "t", 0)
	_, err := b.Publish(ctx, "t", 1, broker.WithDedupID("x"))
	require.ErrorIs(t, err, queue.ErrQueueFull)
	d := s.TryPoll(1)
	require.NoError(t, s.Ack(d[0].LeaseID))
	m, err := b.Publish(ctx, "t", 1, broker.WithDedupID("x"))
	require.NoError(t, err, "the retry is not taken for a duplicate")
	assert.Equal(t, []int{1}, payloads(s.TryPoll(1)))
	_ = m

	// The limit bounds memory: the oldest ids are forgotten early.
	for _, id := range []string{"y", "z", "x"} {
		_, err := b.Publish(ctx, "t", 9, broker.WithDedupID(id))
		if err != nil {
			require.ErrorIs(t, err, queue.ErrQueueFull)
		}
	}
}

// TestPublishDedupRemembersLimitIDs: with a limit of n, the n latest IDs are
// all remembered (the check for a duplicate comes before the eviction that
// makes room for a new ID), so publishing n IDs twice queues n messages.
func TestPublishDedupRemembersLimitIDs(t *testing.T) {
	b, _ := brokertest.New[string](t, broker.WithDedupLimit(3))
	s := brokertest.Subscribe(t, b, "t", "s")
	for range 2 {
		for _, id := range []string{"0", "1", "2"} {
			_, err := b.Publish(ctx, "t", id, broker.WithDedupID(id))
			require.NoError(t, err)
		}
	}
	require.Equal(t, 3, s.Stats().Visible)

	b10, _ := brokertest.New[int](t, broker.WithDedupLimit(10))
	s10 := brokertest.Subscribe(t, b10, "t", "s")
	for range 2 {
		for i := range 10 {
			_, err := b10.Publish(ctx, "t", i, broker.WithDedupID(fmt.Sprint(i)))
			require.NoError(t, err)
		}
	}
	require.Equal(t, 10, s10.Stats().Visible)
}

// TestPublishDedupConcurrentSameID: publishes of one ID that race each other
// queue the message once, and every one of them returns that message.
func TestPublishDedupConcurrentSameID(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	const n = 8
	ids := make([]uuid.UUID, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m, err := b.Publish(ctx, "t", i, broker.WithDedupID("same"))
			assert.NoError(t, err)
			ids[i] = m.ID
		})
	}
	wg.Wait()
	require.Equal(t, 1, s.Stats().Visible)
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
}

// TestPublishDedupFullRefusesNewIDs: at the limit, with every ID inside its
// window, a new ID is refused (ErrDedupFull) and nothing is published; a
// duplicate of a remembered ID is still recognised; once the window has
// passed, new IDs go in again.
func TestPublishDedupFullRefusesNewIDs(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithDedupLimit(2), broker.WithDedupWindow(time.Minute))
	s := brokertest.Subscribe(t, b, "t", "s")
	var first []queue.Message[string]
	for _, id := range []string{"a", "b"} {
		m, err := b.Publish(ctx, "t", id, broker.WithDedupID(id))
		require.NoError(t, err)
		first = append(first, m)
	}
	_, err := b.Publish(ctx, "t", "c", broker.WithDedupID("c"))
	require.ErrorIs(t, err, broker.ErrDedupFull)
	require.Equal(t, 2, s.Stats().Visible, "the refused publish queued nothing")
	m, err := b.Publish(ctx, "t", "a again", broker.WithDedupID("a"))
	require.NoError(t, err)
	require.Equal(t, first[0].ID, m.ID, "a duplicate is still recognised")
	_, err = b.Publish(ctx, "t", "no id")
	require.NoError(t, err, "a publish without an ID is not limited")

	mock.Add(time.Minute)
	_, err = b.Publish(ctx, "t", "c", broker.WithDedupID("c"))
	require.NoError(t, err)
	require.Equal(t, 4, s.Stats().Visible)
}

// A publish that one subscription refuses (OverflowReject) and another
// takes has stored its message: the ID is remembered, so the producer's
// retry returns the original and queues no second copy where the first
// was taken. In memory, on a durable broker, and after a restart.
func TestPublishDedupPartialRefusalRemembers(t *testing.T) {
	// check publishes with an ID that "full" refuses and "took" takes,
	// calls between (a restart, or nothing), then retries. current returns
	// the broker and "took" as they are now.
	check := func(t *testing.T, current func() (*broker.Broker[string], *broker.Subscription[string]), between func()) {
		b, _ := current()
		first, err := b.Publish(ctx, "t", "job", broker.WithDedupID("X"))
		require.ErrorIs(t, err, queue.ErrQueueFull, "the full subscription refused")
		require.NotEqual(t, uuid.Nil, first.ID, "the message is returned: another subscription took it")
		between()
		b, took := current()
		again, err := b.Publish(ctx, "t", "job (retry)", broker.WithDedupID("X"))
		require.NoError(t, err)
		assert.Equal(t, first.ID, again.ID, "the retry is a duplicate of the stored message")
		assert.Equal(t, []string{"job"}, payloads(took.TryPoll(10)), "one copy, not two")
	}
	t.Run("in memory", func(t *testing.T) {
		b, _ := brokertest.New[string](t)
		took := brokertest.Subscribe(t, b, "t", "took")
		brokertest.Subscribe(t, b, "t", "full", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject))
		brokertest.Publish(t, b, "t", "filler") // fills "full"
		drainAck(t, took)
		check(t, func() (*broker.Broker[string], *broker.Subscription[string]) { return b, took }, func() {})
	})
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable, restart %v", restart), func(t *testing.T) {
			d := openDur[string](t, queue.StringCodec())
			declare := func() {
				d.subscribe("t", "took")
				d.subscribe("t", "full", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject))
			}
			declare()
			d.publish("t", "filler")
			drainAck(t, d.sub("t", "took"))
			current := func() (*broker.Broker[string], *broker.Subscription[string]) { return d.Broker, d.sub("t", "took") }
			check(t, current, func() {
				if restart {
					d.restart()
					declare()
				}
			})
		})
	}
}

// drainAck leases and acks everything visible on s.
func drainAck[T any](t *testing.T, s *broker.Subscription[T]) {
	t.Helper()
	for _, d := range s.TryPoll(1 << 20) {
		require.NoError(t, s.Ack(d.LeaseID))
	}
}

// With default options, a service that puts an ID on 1,000 messages a
// second for the whole default window (five minutes: 300,000 IDs) is
// served; the old default refused the 100,001st.
func TestPublishDedupDefaultsServeAThousandASecond(t *testing.T) {
	if testing.Short() {
		t.Skip("300,000 publishes")
	}
	b, mock := brokertest.New[int](t)
	require.NoError(t, b.CreateTopic("t"))
	const perSecond, window = 1000, 300
	for s := range window {
		for i := range perSecond {
			_, err := b.Publish(ctx, "t", i, broker.WithDedupID(fmt.Sprintf("%d-%d", s, i)))
			require.NoError(t, err, "second %d, ID %d", s, i)
		}
		mock.Add(time.Second)
	}
}
