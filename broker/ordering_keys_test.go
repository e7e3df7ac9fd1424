package broker_test

// Ordering keys: one message of a key in flight at a time, in publish order;
// a dead letter lets its key go on.

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

func publishKeyed(t *testing.T, b *broker.Broker[string], topic, key string, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		_, err := b.Publish(ctx, topic, p, broker.WithKey(key))
		require.NoError(t, err)
	}
}

func TestOrderingKeysOneInFlightPerKey(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithRetry(queue.RetryPolicy{Initial: time.Second}))
	publishKeyed(t, b, "t", "a", "a1", "a2", "a3")
	publishKeyed(t, b, "t", "b", "b1", "b2")
	brokertest.Publish(t, b, "t", "free")

	first := s.TryPoll(10)
	assert.Equal(t, []string{"a1", "b1", "free"}, payloads(first), "one head per key; unkeyed flow")
	st := s.Stats()
	assert.Equal(t, 3, st.HeldBack)
	balanced(t, st)

	// a1 fails: a2 stays held while a1 waits out its backoff.
	require.NoError(t, s.Fail(first[0].LeaseID, errors.New("x")))
	require.NoError(t, s.Ack(first[1].LeaseID)) // b1 done: b2 goes
	assert.Equal(t, []string{"b2"}, payloads(s.TryPoll(10)))
	mock.Add(time.Second)
	a1 := s.TryPoll(10)
	assert.Equal(t, []string{"a1"}, payloads(a1))
	assert.Equal(t, 2, a1[0].Attempt)

	// An expired lease keeps the key blocked until the message is redelivered and acked.
	mock.Add(vis)
	a1 = s.TryPoll(10)
	assert.Equal(t, []string{"a1", "b2", "free"}, payloads(a1), "all three expired; places kept")
	require.NoError(t, s.Ack(a1[0].LeaseID))
	assert.Equal(t, []string{"a2"}, payloads(s.TryPoll(10)))
}

func TestOrderingKeyGoesOnAfterDeadLetter(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxAttempts(1))
	publishKeyed(t, b, "t", "k", "k1", "k2")
	d := s.TryPoll(10)
	require.Equal(t, []string{"k1"}, payloads(d))
	require.NoError(t, s.Fail(d[0].LeaseID, errors.New("poison")))
	dls := b.DeadLetters()
	require.Len(t, dls, 1)
	assert.True(t, dls[0].KeyContinued, "the dead letter records that k2 went on without it")
	assert.Equal(t, "k", dls[0].Message.Key)
	d = s.TryPoll(10)
	assert.Equal(t, []string{"k2"}, payloads(d))
	require.NoError(t, s.Fail(d[0].LeaseID, errors.New("poison")))
	assert.False(t, b.DeadLetters()[1].KeyContinued)

	// Redrive keeps the key and the place.
	n, err := b.Redrive(func(queue.DeadLetter[string]) bool { return true })
	require.NoError(t, err)
	require.Equal(t, 2, n)
	assert.Equal(t, []string{"k1"}, payloads(s.TryPoll(10)))
	assert.Equal(t, 1, s.Stats().HeldBack)
}
