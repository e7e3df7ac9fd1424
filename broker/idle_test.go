package broker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

// A subscription is not idle while a dead letter it made is on its way to
// the broker (the store, or a dead-letter topic): RunUntilIdle and then
// DeadLetters must see it. (Found from outside: AwaitIdle returned in the
// window between the queue letting go of the message and the broker
// taking the letter.) A filter on the dead-letter topic holds the letter
// on its way; AwaitIdle with a done context answers "idle now?" without
// waiting.
func TestAwaitIdleWaitsForTheDeadLetterOnItsWay(t *testing.T) {
	b, _ := brokertest.New[string](t)
	entered, release := make(chan struct{}), make(chan struct{})
	brokertest.Subscribe(t, b, "dlq", "ops", broker.WithFilter(func(queue.Message[string]) bool {
		close(entered)
		<-release
		return true
	}))
	s := brokertest.Subscribe(t, b, "jobs", "work", broker.WithMaxAttempts(1), broker.WithDeadLetterTopic("dlq"))
	brokertest.Publish(t, b, "jobs", "poison")
	d := s.TryPoll(1)[0]
	failed := make(chan error, 1)
	go func() { failed <- s.Fail(d.LeaseID, errors.New("boom")) }()
	<-entered

	done, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, s.AwaitIdle(done), context.Canceled, "idle while its dead letter is on its way")
	close(release)
	require.NoError(t, <-failed)
	require.NoError(t, s.AwaitIdle(context.Background()))
	ops, err := b.Subscription("dlq", "ops")
	require.NoError(t, err)
	assert.Len(t, ops.TryPoll(1), 1, "the letter arrived")
}
