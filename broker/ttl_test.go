package broker_test

// Message TTL: a message past its time to live is dead-lettered, not
// delivered.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

func TestTTL(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithDefaultTTL(time.Minute))
	_, err := b.Publish(ctx, "t", "short", broker.WithTTL(5*time.Second))
	require.NoError(t, err)
	brokertest.Publish(t, b, "t", "default")

	mock.Add(5*time.Second - time.Nanosecond)
	assert.Equal(t, 2, s.Stats().Visible)
	mock.Add(time.Nanosecond) // now == PublishedAt + TTL
	dls := b.DeadLetters()
	require.Len(t, dls, 1, "expired while waiting")
	assert.Equal(t, "short", dls[0].Message.Payload)
	assert.Equal(t, queue.ReasonExpired, dls[0].Reason)
	assert.Equal(t, 0, dls[0].Attempts)

	d, err := s.PollWithVisibility(ctx, 1, 2*time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"default"}, payloads(d))
	mock.Add(time.Minute) // past the TTL, but in flight: may still be acked
	require.NoError(t, s.Ack(d[0].LeaseID))
	balanced(t, s.Stats())

	brokertest.Publish(t, b, "t", "comes back")
	mock.Add(time.Minute - vis)
	d = s.TryPoll(1)
	require.Len(t, d, 1)
	mock.Add(vis) // lease expires after the TTL: dead-lettered, not redelivered
	assert.Empty(t, s.TryPoll(1))
	dls = b.DeadLetters()
	require.Len(t, dls, 2)
	assert.Equal(t, queue.ReasonExpired, dls[1].Reason)
	assert.Equal(t, 1, dls[1].Attempts)

	// Redrive counts the TTL again from the redrive.
	n, err := b.Redrive(func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload == "comes back" })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	mock.Add(time.Minute - time.Nanosecond)
	assert.Equal(t, 1, s.Stats().Visible)
	mock.Add(time.Nanosecond)
	assert.Equal(t, 0, s.Stats().Visible)
	balanced(t, s.Stats())

	_, err = b.Publish(ctx, "t", "x", broker.WithTTL(0))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}
