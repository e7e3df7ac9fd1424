package broker_test

// Dead-letter topics: a subscription's dead letters published to a topic, with
// their reason in headers, and read back with DeadLetterOf.

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

func TestDeadLetterTopic(t *testing.T) {
	b, _ := brokertest.New[string](t)
	require.NoError(t, b.CreateTopic("dlq"))
	s := brokertest.Subscribe(t, b, "jobs", "worker", broker.WithMaxAttempts(1), broker.WithDeadLetterTopic("dlq"))
	_, err := b.Publish(ctx, "jobs", "no subscriber yet")
	require.NoError(t, err)
	d := s.TryPoll(1)[0]
	require.NoError(t, s.Fail(d.LeaseID, errors.New("first")))
	assert.Len(t, b.DeadLetters(), 1, "a dead-letter topic nobody reads falls back to the store")

	dlq := brokertest.Subscribe(t, b, "dlq", "ops")
	_, err = b.Publish(ctx, "jobs", "poison", broker.WithHeaders(map[string]string{"tenant": "acme"}), broker.WithPriority(queue.PriorityHigh))
	require.NoError(t, err)
	d = s.TryPoll(1)[0]
	require.NoError(t, s.Fail(d.LeaseID, errors.New("bad input")))
	assert.Len(t, b.DeadLetters(), 1, "routed to the topic, not the store")

	got := dlq.TryPoll(1)
	require.Len(t, got, 1)
	dl := got[0]
	assert.Equal(t, "poison", dl.Payload)
	assert.Equal(t, queue.PriorityHigh, dl.Priority)
	assert.Equal(t, "acme", dl.Headers.Get("tenant"))
	assert.Equal(t, "max-attempts", dl.Headers.Get(backend.HeaderReason))
	assert.Equal(t, "1", dl.Headers.Get(backend.HeaderAttempts))
	assert.Equal(t, "bad input", dl.Headers.Get(backend.HeaderLastError))
	assert.Equal(t, "worker", dl.Headers.Get(backend.HeaderSubscription))
	assert.Equal(t, "jobs", dl.Headers.Get(backend.HeaderTopic))
	assert.Equal(t, d.ID.String(), dl.Headers.Get(backend.HeaderMessageID))

	back, ok := broker.DeadLetterOf(dl.Message)
	require.True(t, ok, "a message from a dead-letter topic reads back as its dead letter")
	assert.Equal(t, queue.DeadLetter[string]{
		Subscription: "worker",
		Topic:        "jobs",
		Message: queue.Message[string]{ID: d.ID, Topic: "jobs", Payload: "poison", Priority: queue.PriorityHigh,
			Headers: queue.NewHeaders(map[string]string{"tenant": "acme"}), PublishedAt: dl.PublishedAt},
		Reason:    queue.ReasonMaxAttempts,
		Attempts:  1,
		LastError: "bad input",
		At:        b.Clock().Now(),
	}, back)
	_, ok = broker.DeadLetterOf(d.Message)
	assert.False(t, ok, "an ordinary message carries no dead letter")
	require.NoError(t, dlq.Ack(dl.LeaseID))

	_, err = b.Subscribe("jobs", "bad", broker.WithDeadLetterTopic("a.*"))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}
