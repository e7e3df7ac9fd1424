package broker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
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

// AwaitIdle returns when the subscription empties by the passage of time
// alone: a message past its TTL, a lease abandoned on its last attempt.
// It arms a wake-up for the next due event; it used to wait for a signal
// from another call and sleep until its context ended. Inside a synctest
// bubble on the real clock, time moves only when every goroutine waits.
func TestAwaitIdleWakesWhenTimeEmptiesIt(t *testing.T) {
	for name, setup := range map[string]func(t *testing.T, b *broker.Broker[string], s *broker.Subscription[string]){
		"TTL": func(t *testing.T, b *broker.Broker[string], _ *broker.Subscription[string]) {
			_, err := b.Publish(ctx, "t", "x", broker.WithTTL(50*time.Millisecond))
			require.NoError(t, err)
		},
		"abandoned lease on its last attempt": func(t *testing.T, b *broker.Broker[string], s *broker.Subscription[string]) {
			_, err := b.Publish(ctx, "t", "x")
			require.NoError(t, err)
			require.Len(t, s.TryPoll(1), 1) // never settled
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, err := broker.New[string](broker.WithClock(clock.New()))
				require.NoError(t, err)
				defer b.Close()
				require.NoError(t, b.CreateTopic("t"))
				s, err := b.Subscribe("t", "s", broker.WithMaxAttempts(1), broker.WithVisibilityTimeout(time.Second))
				require.NoError(t, err)
				setup(t, b, s)
				c, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				start := time.Now()
				require.NoError(t, s.AwaitIdle(c))
				require.Less(t, time.Since(start), time.Minute, "woken by the event, not by the context")
				require.Len(t, b.DeadLetters(), 1)
			})
		})
	}
}
