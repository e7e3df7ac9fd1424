package core

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// countingClock counts the reads of a mock clock.
type countingClock struct {
	*clock.Mock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time { c.reads.Add(1); return c.Mock.Now() }

// An Ack reads the clock only when the time can change its outcome: the
// lease's last attempt (expiry dead-letters it), an ordering key (the next
// message's turn), a TTL (it may have passed). Each case is checked both
// ways: how many clock reads, and that the outcome is the one a settle at
// the clock's now gives.
func TestAckReadsTheClockOnlyWhenItMatters(t *testing.T) {
	const vis = time.Minute
	newQueue := func(t *testing.T, maxAttempts int) (*Queue[int], *countingClock, *[]Letter[int]) {
		clk := &countingClock{Mock: clock.NewMock()}
		var dead []Letter[int]
		q, err := New(queue.Config{Clock: clk, VisibilityTimeout: vis, MaxAttempts: maxAttempts}, func(dl Letter[int]) { dead = append(dead, dl) })
		require.NoError(t, err)
		t.Cleanup(func() { q.Close() })
		return q, clk, &dead
	}
	offer := func(t *testing.T, q *Queue[int], m *queue.Message[int], opts ...OfferOption) {
		require.NoError(t, q.Offer(context.Background(), m, 0, opts...))
	}
	ack := func(q *Queue[int], clk *countingClock, d queue.Delivery[int]) (int64, error) {
		before := clk.reads.Load()
		err := q.Ack(d.LeaseID)
		return clk.reads.Load() - before, err
	}

	t.Run("attempts left: no read, a late ack succeeds", func(t *testing.T) {
		q, clk, _ := newQueue(t, 2)
		offer(t, q, &queue.Message[int]{Payload: 1})
		offer(t, q, &queue.Message[int]{Payload: 2})
		ds := q.TryPoll(2)
		reads, err := ack(q, clk, ds[0])
		assert.NoError(t, err)
		assert.Zero(t, reads)
		clk.Add(vis) // ds[1] expires, not yet settled
		reads, err = ack(q, clk, ds[1])
		assert.NoError(t, err, "a late ack before redelivery")
		assert.Zero(t, reads)
		assert.Equal(t, queue.Stats{Published: 2, Delivered: 2, Acked: 2}, q.Stats())
	})
	t.Run("last attempt: read, and the expiry dead-letters it", func(t *testing.T) {
		q, clk, dead := newQueue(t, 1)
		offer(t, q, &queue.Message[int]{Payload: 1})
		offer(t, q, &queue.Message[int]{Payload: 2})
		ds := q.TryPoll(2)
		reads, err := ack(q, clk, ds[0])
		assert.NoError(t, err, "before the deadline")
		assert.Equal(t, int64(1), reads)
		clk.Add(vis)
		_, err = ack(q, clk, ds[1])
		assert.ErrorIs(t, err, queue.ErrLeaseNotFound, "dead-lettered at its deadline")
		require.Len(t, *dead, 1)
		assert.Equal(t, queue.ReasonMaxAttempts, (*dead)[0].Reason)
	})
	t.Run("expired and settled on its last attempt: gone", func(t *testing.T) {
		q, clk, _ := newQueue(t, 1)
		offer(t, q, &queue.Message[int]{Payload: 1})
		d := q.TryPoll(1)[0]
		clk.Add(vis)
		q.Stats() // settles: dead-lettered
		reads, err := ack(q, clk, d)
		assert.ErrorIs(t, err, queue.ErrLeaseNotFound)
		assert.Equal(t, int64(1), reads, "a lease that is not current takes the path that settles first")
	})
	t.Run("ordering key: read", func(t *testing.T) {
		q, clk, _ := newQueue(t, 5)
		offer(t, q, &queue.Message[int]{Payload: 1, Key: "k"})
		offer(t, q, &queue.Message[int]{Payload: 2, Key: "k"})
		d := q.TryPoll(1)[0]
		reads, err := ack(q, clk, d)
		assert.NoError(t, err)
		assert.Equal(t, int64(1), reads)
		assert.Equal(t, 2, q.TryPoll(1)[0].Payload, "the key's next message")
	})
	t.Run("TTL passed after expiry: read, dead-lettered as expired", func(t *testing.T) {
		q, clk, dead := newQueue(t, 5)
		offer(t, q, &queue.Message[int]{Payload: 1}, WithTTL(vis))
		d := q.TryPoll(1)[0]
		clk.Add(vis) // the lease expires and the TTL passes
		reads, err := ack(q, clk, d)
		assert.ErrorIs(t, err, queue.ErrLeaseNotFound)
		assert.Equal(t, int64(1), reads)
		require.Len(t, *dead, 1)
		assert.Equal(t, queue.ReasonExpired, (*dead)[0].Reason)
	})
	t.Run("AckBatch: no read unless one of them needs it", func(t *testing.T) {
		q, clk, _ := newQueue(t, 5)
		for p := range 3 {
			offer(t, q, &queue.Message[int]{Payload: p})
		}
		ds := q.TryPoll(3)
		before := clk.reads.Load()
		err := q.AckBatch([]lease.ID{ds[0].LeaseID, ds[1].LeaseID, ds[1].LeaseID})
		assert.ErrorIs(t, err, queue.ErrLeaseNotFound, "the same lease twice: the second is gone")
		assert.Zero(t, clk.reads.Load()-before)
		assert.NoError(t, q.AckBatch([]lease.ID{ds[2].LeaseID}))
		assert.Equal(t, uint64(3), q.Stats().Acked)
	})
}
