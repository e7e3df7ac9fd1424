package broker_test

// A full subscription's refusal, typed.

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// TestFullSubscriptionRefusalIsTyped: a full subscription's refusal says
// which subscription and its limit (errors.As), and still matches
// queue.ErrQueueFull (errors.Is), for every way to meet it.
func TestFullSubscriptionRefusalIsTyped(t *testing.T) {
	synctest.Test(t, testFullSubscriptionRefusalIsTyped)
}

// publishGivingUp publishes to t with a context canceled once the publish
// blocks (OverflowBlock): in a bubble, synctest.Wait says when.
func publishGivingUp(b *broker.Broker[string], payload string) error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.Publish(ctx, "t", payload)
		done <- err
	}()
	synctest.Wait()
	cancel()
	return <-done
}

func testFullSubscriptionRefusalIsTyped(t *testing.T) {
	b, err := broker.New[string](broker.WithClock(clock.New()))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	rej, err := b.Subscribe("t", "reject", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject))
	require.NoError(t, err)
	_, err = b.Subscribe("t", "block", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowBlock))
	require.NoError(t, err)
	_, err = b.Publish(context.Background(), "t", "first")
	require.NoError(t, err)

	_, err = b.Publish(canceled(), "t", "refused")
	require.Equal(t, context.Canceled, err, "a publish whose context is done publishes nothing")
	err = publishGivingUp(b, "second")
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
	require.ErrorIs(t, publishGivingUp(b, "refill"), queue.ErrQueueFull) // "block" is still full; "reject" took it
	_, err = b.Redrive(func(queue.DeadLetter[string]) bool { return true })
	var fe *queue.FullError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "reject", fe.Subscription)
}
