package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// TestZeroBrokerSaysToUseTheConstructor: every method of a zero Broker
// either works (an empty, harmless answer) or returns an error matching
// queue.ErrInvalidArgument that says to use New or Open; none panics.
func TestZeroBrokerSaysToUseTheConstructor(t *testing.T) {
	var b broker.Broker[string]
	for name, err := range map[string]error{
		"CreateTopic": b.CreateTopic("t"),
		"DeleteTopic": b.DeleteTopic("t"),
		"Unsubscribe": b.Unsubscribe("t", "s"),
		"Publish":     func() error { _, err := b.Publish(ctx, "t", "x"); return err }(),
		"PublishBatch": func() error {
			_, err := b.PublishBatch(ctx, "t", []string{"x"})
			return err
		}(),
		"Subscribe":     func() error { _, err := b.Subscribe("t", "s"); return err }(),
		"Subscription":  func() error { _, err := b.Subscription("t", "s"); return err }(),
		"Subscriptions": func() error { _, err := b.Subscriptions("t"); return err }(),
	} {
		require.ErrorIs(t, err, queue.ErrInvalidArgument, name)
		require.ErrorContains(t, err, "broker.New", name)
	}
	n, err := b.Redrive(func(queue.DeadLetter[string]) bool { return true })
	require.NoError(t, err, "nothing to redrive")
	require.Zero(t, n)
	require.Empty(t, b.Topics())
	require.Empty(t, b.DeadLetters())
	require.Zero(t, b.DeadLetterStats())
	require.Equal(t, broker.RecoveryInfo{}, b.Recovery())
	require.NoError(t, b.Sync())
	require.NoError(t, b.Compact())
	require.NoError(t, b.Close())
}

// TestEmptyNamesAreInvalidArguments: an empty topic or subscription name is
// an invalid argument everywhere, not a topic that was not found.
func TestEmptyNamesAreInvalidArguments(t *testing.T) {
	b, err := broker.New[string]()
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	for name, err := range map[string]error{
		"CreateTopic":         b.CreateTopic(""),
		"DeleteTopic":         b.DeleteTopic(""),
		"Unsubscribe topic":   b.Unsubscribe("", "s"),
		"Unsubscribe name":    b.Unsubscribe("t", ""),
		"Publish":             func() error { _, err := b.Publish(ctx, "", "x"); return err }(),
		"PublishBatch":        func() error { _, err := b.PublishBatch(ctx, "", []string{"x"}); return err }(),
		"Subscribe topic":     func() error { _, err := b.Subscribe("", "s"); return err }(),
		"Subscribe name":      func() error { _, err := b.Subscribe("t", ""); return err }(),
		"Subscription topic":  func() error { _, err := b.Subscription("", "s"); return err }(),
		"Subscription name":   func() error { _, err := b.Subscription("t", ""); return err }(),
		"Subscriptions":       func() error { _, err := b.Subscriptions(""); return err }(),
		"Publish bad topic":   func() error { _, err := b.Publish(ctx, "a b", "x"); return err }(),
		"Publish to pattern?": func() error { _, err := b.Publish(ctx, "a.*", "x"); return err }(),
	} {
		require.ErrorIs(t, err, queue.ErrInvalidArgument, name)
	}
	_, err = b.Publish(ctx, "missing", "x")
	require.ErrorIs(t, err, broker.ErrTopicNotFound, "a valid name that is not a topic")
}

// TestZeroSubscriptionSaysToUseSubscribe: every method of a zero
// Subscription returns an error matching queue.ErrInvalidArgument, or an
// empty answer; none panics.
func TestZeroSubscriptionSaysToUseSubscribe(t *testing.T) {
	var s broker.Subscription[string]
	var id lease.ID
	buf := make([]queue.Delivery[string], 1)
	for name, err := range map[string]error{
		"Poll":               func() error { _, err := s.Poll(ctx, 1); return err }(),
		"PollInto":           func() error { _, err := s.PollInto(ctx, buf); return err }(),
		"PollWithVisibility": func() error { _, err := s.PollWithVisibility(ctx, 1, time.Second); return err }(),
		"TryPollInto":        func() error { _, err := s.TryPollInto(buf); return err }(),
		"Ack":                s.Ack(id),
		"AckBatch":           s.AckBatch([]lease.ID{id}),
		"Nack":               s.Nack(id, 0),
		"Fail":               s.Fail(id, nil),
		"Reject":             s.Reject(id, nil),
		"Release":            s.Release(id),
		"Extend":             s.Extend(id, time.Second),
		"Purge":              func() error { _, err := s.Purge(); return err }(),
		"AwaitIdle":          s.AwaitIdle(ctx),
		"AwaitParked":        s.AwaitParked(ctx, 1),
	} {
		require.ErrorIs(t, err, queue.ErrInvalidArgument, name)
		require.ErrorContains(t, err, "Subscribe", name)
	}
	require.Empty(t, s.TryPoll(1))
	require.Equal(t, queue.Stats{}, s.Stats())
	require.Equal(t, queue.Config{}, s.Config())
	require.Empty(t, s.Name())
	require.Empty(t, s.Topic())
}
