package broker_test

// A full subscription's refusal, typed.

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

// TestFullSubscriptionRefusalIsTyped: a full subscription's refusal says
// which subscription and its limit (errors.As), and still matches
// queue.ErrQueueFull (errors.Is), for every way to meet it.
func TestFullSubscriptionRefusalIsTyped(t *testing.T) {
	b, _ := brokertest.New[string](t)
	rej := brokertest.Subscribe(t, b, "t", "reject", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject))
	brokertest.Subscribe(t, b, "t", "block", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowBlock))
	brokertest.Publish(t, b, "t", "first")

	_, err := b.Publish(canceled(), "t", "second")
	require.ErrorIs(t, err, queue.ErrQueueFull)
	require.ErrorIs(t, err, context.Canceled, "the blocked publisher's reason")
	var names []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *queue.FullError
		require.ErrorAs(t, e, &fe)
		require.Equal(t, 1, fe.Limit)
		names = append(names, fe.Subscription)
	}
	require.ElementsMatch(t, []string{"reject", "block"}, names)

	// A redrive into a full subscription.
	d := rej.TryPoll(1)
	require.NoError(t, rej.Reject(d[0].LeaseID, errors.New("no")))
	_, err = b.Publish(canceled(), "t", "refill")
	require.ErrorIs(t, err, queue.ErrQueueFull) // "block" is still full; "reject" took it
	_, err = b.Redrive(func(queue.DeadLetter[string]) bool { return true })
	var fe *queue.FullError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "reject", fe.Subscription)
}
