package broker_test

// The broker's calls and their errors, invalid options, and what Close,
// DeleteTopic and Unsubscribe do to subscriptions in use.

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

func TestCalls(t *testing.T) {
	b, _ := brokertest.New[int](t)
	require.NoError(t, b.CreateTopic("b.two"))
	require.NoError(t, b.CreateTopic("a.one"))
	require.NoError(t, b.CreateTopic("a.one"), "idempotent")
	assert.Equal(t, []string{"a.one", "b.two"}, b.Topics())

	_, err := b.Publish(ctx, "missing", 1)
	assert.ErrorIs(t, err, broker.ErrTopicNotFound)
	_, err = b.Subscribe("missing", "s")
	assert.ErrorIs(t, err, broker.ErrTopicNotFound)
	_, err = b.Subscribe("a.one", "s")
	require.NoError(t, err)
	_, err = b.Subscribe("a.one", "s")
	assert.ErrorIs(t, err, broker.ErrAlreadySubscribed)
	same, err := b.Subscription("a.one", "s")
	require.NoError(t, err)
	assert.Equal(t, "s", same.Name())
	_, err = b.Subscription("a.one", "nope")
	assert.ErrorIs(t, err, broker.ErrSubscriptionNotFound)
	assert.ErrorIs(t, b.Unsubscribe("a.one", "nope"), broker.ErrSubscriptionNotFound)
	assert.ErrorIs(t, b.DeleteTopic("nope"), broker.ErrTopicNotFound)

	m, err := b.Publish(ctx, "b.two", 7) // no subscriptions: accepted and dropped
	require.NoError(t, err)
	assert.Equal(t, brokertest.Epoch, m.PublishedAt)

	for _, name := range []string{"", " ", "a b", "a..b", ".a", "a.", "a.*", "a.>", "#", "tab\t", strings.Repeat("x", 256)} {
		assert.ErrorIs(t, b.CreateTopic(name), queue.ErrInvalidArgument, "topic %q", name)
	}
	_, err = b.Subscribe("a.one", "")
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)

	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "Close twice is safe")
	_, err = b.Publish(ctx, "a.one", 1)
	assert.ErrorIs(t, err, queue.ErrClosed)
	assert.ErrorIs(t, b.CreateTopic("c"), queue.ErrClosed)
	_, err = b.Subscribe("a.one", "x")
	assert.ErrorIs(t, err, queue.ErrClosed)
	_, err = b.Redrive(func(queue.DeadLetter[int]) bool { return true })
	assert.ErrorIs(t, err, queue.ErrClosed)
}

func TestInvalidOptions(t *testing.T) {
	cases := map[string]broker.Option{
		"nil clock":          broker.WithClock(nil),
		"zero visibility":    broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(0)),
		"negative vis":       broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(-time.Second)),
		"zero attempts":      broker.WithSubscriptionDefaults(broker.WithMaxAttempts(0)),
		"negative attempts":  broker.WithSubscriptionDefaults(broker.WithMaxAttempts(-2)),
		"zero queue":         broker.WithSubscriptionDefaults(broker.WithMaxQueue(0)),
		"bad overflow":       broker.WithSubscriptionDefaults(broker.WithOverflow(queue.OverflowPolicy(42))),
		"zero in flight":     broker.WithSubscriptionDefaults(broker.WithMaxInFlight(0)),
		"negative retry":     broker.WithSubscriptionDefaults(broker.WithRetry(queue.RetryPolicy{Initial: -1})),
		"jitter above one":   broker.WithSubscriptionDefaults(broker.WithRetry(queue.RetryPolicy{Jitter: 2})),
		"multiplier below 1": broker.WithSubscriptionDefaults(broker.WithRetry(queue.RetryPolicy{Multiplier: 0.5})),
		"zero DLQ limit":     broker.WithDeadLetterLimit(0),
		"zero option":        {},
	}
	for name, opt := range cases {
		_, err := broker.New[int](opt)
		assert.ErrorIs(t, err, queue.ErrInvalidArgument, name)
	}
	b, err := broker.New[int](broker.WithSubscriptionDefaults(broker.WithMaxAttempts(queue.UnlimitedAttempts)))
	require.NoError(t, err)
	require.NoError(t, b.Close())
}

func TestCloseWakesBlockedPollers(t *testing.T) {
	for name, closeFn := range map[string]func(*broker.Broker[int]) error{
		"Close":       func(b *broker.Broker[int]) error { return b.Close() },
		"DeleteTopic": func(b *broker.Broker[int]) error { return b.DeleteTopic("t") },
		"Unsubscribe": func(b *broker.Broker[int]) error { return b.Unsubscribe("t", "s") },
	} {
		t.Run(name, func(t *testing.T) {
			b, _ := brokertest.New[int](t)
			s := brokertest.Subscribe(t, b, "t", "s")
			const pollers = 3
			errc := make(chan error, pollers)
			for range pollers {
				go func() {
					_, err := s.Poll(ctx, 1)
					errc <- err
				}()
			}
			brokertest.AwaitParked(t, s, pollers)
			require.NoError(t, closeFn(b))
			for range pollers {
				assert.ErrorIs(t, <-errc, queue.ErrClosed)
			}
			assert.ErrorIs(t, s.Ack(lease0()), queue.ErrClosed)
			_, err := s.Poll(ctx, 1)
			assert.ErrorIs(t, err, queue.ErrClosed)
		})
	}
}

func lease0() lease.ID { return lease.ID{} }

func TestUnsubscribeFromInsideProcessing(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	brokertest.Publish(t, b, "t", 1, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ds, err := s.Poll(ctx, 1)
			if errors.Is(err, queue.ErrClosed) {
				return
			}
			require.NoError(t, err)
			// Settle and leave from inside the loop: no lock is held here.
			assert.NoError(t, s.Ack(ds[0].LeaseID))
			assert.NoError(t, b.Unsubscribe("t", "s"))
		}
	}()
	<-done
	_, err := b.Subscription("t", "s")
	assert.ErrorIs(t, err, broker.ErrSubscriptionNotFound)
}
