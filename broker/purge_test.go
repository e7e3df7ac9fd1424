package broker_test

// Per-poll visibility timeouts and Purge.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

func TestPollWithVisibilityAndPurge(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s")
	brokertest.Publish(t, b, "t", "a", "b", "c")
	d, err := s.PollWithVisibility(ctx, 1, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, brokertest.Epoch.Add(time.Hour), d[0].Deadline)
	mock.Add(vis)
	assert.Equal(t, 1, s.Stats().InFlight, "this poll's lease outlives the subscription's timeout")
	_, err = s.PollWithVisibility(ctx, 1, 0)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)

	n, err := s.Purge()
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	st := s.Stats()
	assert.Equal(t, uint64(3), st.Dropped)
	balanced(t, st)
	assert.ErrorIs(t, s.Ack(d[0].LeaseID), queue.ErrLeaseNotFound, "purged")
	brokertest.Publish(t, b, "t", "after")
	assert.Equal(t, []string{"after"}, payloads(s.TryPoll(10)))
}
