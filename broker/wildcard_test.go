package broker_test

// Wildcard subscriptions: '*' matches one segment; '>' and '#', as the last
// segment, one or more.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

func TestWildcardSubscriptions(t *testing.T) {
	b, _ := brokertest.New[string](t)
	require.NoError(t, b.CreateTopic("orders.eu.created"))
	one, err := b.Subscribe("orders.*.created", "one-segment")
	require.NoError(t, err)
	rest, err := b.Subscribe("orders.>", "rest")
	require.NoError(t, err)
	hash, err := b.Subscribe("#", "everything")
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("orders.us.created")) // created after the subscriptions
	require.NoError(t, b.CreateTopic("orders.us.paid"))
	require.NoError(t, b.CreateTopic("orders"))

	for _, topic := range []string{"orders.eu.created", "orders.us.created", "orders.us.paid", "orders"} {
		brokertest.Publish(t, b, topic, topic)
	}
	assert.Equal(t, []string{"orders.eu.created", "orders.us.created"}, payloads(one.TryPoll(10)))
	assert.Equal(t, []string{"orders.eu.created", "orders.us.created", "orders.us.paid"}, payloads(rest.TryPoll(10)), "'>' needs at least one segment")
	got := hash.TryPoll(10)
	assert.Len(t, got, 4)
	assert.Equal(t, "orders.us.paid", got[2].Topic, "a delivery names its real topic")

	same, err := b.Subscription("orders.>", "rest")
	require.NoError(t, err)
	assert.Same(t, rest, same)
	require.NoError(t, b.DeleteTopic("orders.eu.created"))
	_, err = rest.Poll(canceled(), 1)
	assert.ErrorIs(t, err, context.Canceled, "a pattern subscription outlives a deleted topic")
	require.NoError(t, b.Unsubscribe("orders.>", "rest"))
	brokertest.Publish(t, b, "orders.us.paid", "after")
	_, err = rest.Poll(ctx, 1)
	assert.ErrorIs(t, err, queue.ErrClosed)
	assert.Len(t, hash.TryPoll(10), 1)

	for _, p := range []string{"a.>.b", "a.b*", "*.", ">x"} {
		_, err := b.Subscribe(p, "bad")
		assert.ErrorIs(t, err, queue.ErrInvalidArgument, p)
	}
}
