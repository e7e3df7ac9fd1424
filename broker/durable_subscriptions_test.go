package broker_test

// Durable subscriptions: declared again after a restart, removed, fanned
// out. Helpers are durable_test.go's.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// TestDurableResubscribe: a recovered subscription is declared again with
// Subscribe, which returns it; options that change it need WithUpdate
// (TestDurableResubscribeBindsAsStored), and then apply from then on; the
// options persist, the filter does not.
func TestDurableResubscribe(t *testing.T) {
	keep := broker.WithFilter(func(m queue.Message[string]) bool { return strings.HasPrefix(m.Payload, "keep") })
	fresh := broker.WithFilter(func(m queue.Message[string]) bool { return strings.HasPrefix(m.Payload, "new") })
	d := openDur[string](t, queue.StringCodec())
	d.subscribe("t", "s", broker.WithMaxAttempts(5), broker.WithVisibilityTimeout(10*time.Second), keep)
	d.publish("t", "keep1")
	d.publish("t", "drop1")
	d.publish("t", "keep2")

	d.restart()
	s := d.sub("t", "s") // before Subscribe
	require.Equal(t, 5, s.Config().MaxAttempts)
	d.publish("t", "drop2") // no filter until the subscription is declared again
	again, err := d.Subscribe("t", "s", broker.WithMaxAttempts(5), broker.WithVisibilityTimeout(10*time.Second), keep)
	require.NoError(t, err)
	require.Same(t, s, again)
	_, err = d.Subscribe("t", "s", broker.WithMaxAttempts(5), broker.WithVisibilityTimeout(10*time.Second), keep)
	require.ErrorIs(t, err, broker.ErrAlreadySubscribed)
	d.publish("t", "drop3")
	require.Equal(t, []string{"keep1/1", "keep2/1", "drop2/1"}, peek(t, s))

	// Other options, asked for: they apply from now on.
	d.restart()
	s, err = d.Subscribe("t", "s", broker.WithMaxAttempts(2), broker.WithVisibilityTimeout(20*time.Second), fresh, broker.WithUpdate())
	require.NoError(t, err)
	require.Equal(t, 2, s.Config().MaxAttempts)
	require.Equal(t, 20*time.Second, s.Config().VisibilityTimeout)
	d.publish("t", "keep3")
	d.publish("t", "new1")
	ds := s.TryPoll(10)
	require.Equal(t, []string{"keep1", "keep2", "drop2", "new1"}, payloads(ds))
	for _, dv := range ds {
		require.True(t, dv.Deadline.Equal(d.mock.Now().Add(20*time.Second)))
		require.NoError(t, s.Nack(dv.LeaseID, 0))
	}
	for _, dv := range s.TryPoll(10) {
		require.Equal(t, 2, dv.Attempt)
		require.NoError(t, s.Nack(dv.LeaseID, 0)) // the new limit
	}
	require.Equal(t, []string{"keep1", "keep2", "drop2", "new1"}, deadPayloads(d.Broker))

	// ... and persist without being given again.
	d.restart()
	s = d.sub("t", "s")
	require.Equal(t, 2, s.Config().MaxAttempts)
	require.Equal(t, 20*time.Second, s.Config().VisibilityTimeout)
	d.publish("t", "x")
	dv := pollOneDur(t, s)
	require.True(t, dv.Deadline.Equal(d.mock.Now().Add(20*time.Second)))
	require.NoError(t, s.Nack(dv.LeaseID, 0))
	require.NoError(t, s.Nack(pollOneDur(t, s).LeaseID, 0))
	dls := d.DeadLetters()
	require.Len(t, dls, 5)
	require.Equal(t, "x", dls[4].Message.Payload)
	require.Equal(t, 2, dls[4].Attempts)

	t.Run("wildcard", func(t *testing.T) {
		d := openDur[string](t, queue.StringCodec())
		require.NoError(t, d.CreateTopic("orders.eu"))
		_, err := d.Subscribe("orders.*", "all", broker.WithMaxAttempts(3))
		require.NoError(t, err)
		d.publish("orders.eu", "a")
		d.restart()
		require.NoError(t, d.CreateTopic("orders.us"))
		d.publish("orders.us", "b")
		s := d.sub("orders.*", "all")
		require.Equal(t, 3, s.Config().MaxAttempts)
		again, err := d.Subscribe("orders.*", "all", broker.WithMaxAttempts(3))
		require.NoError(t, err)
		require.Same(t, s, again)
		require.Equal(t, []string{"a/1", "b/1"}, peek(t, s))
		d.restart()
		require.Equal(t, []string{"a/1", "b/1"}, peek(t, d.sub("orders.*", "all")))
	})

	t.Run("retry jitter source", func(t *testing.T) {
		// Subscribe after a restart with a RetryPolicy whose Rand is the
		// only difference from what the journal has: Rand (a function, not
		// persisted) must apply from then on, like every other option.
		retry := func(r func() float64) broker.SubscribeOption {
			return broker.WithRetry(queue.RetryPolicy{Initial: 40 * time.Second, Max: time.Minute, Jitter: 0.5, Rand: r})
		}
		d := openDur[string](t, queue.StringCodec())
		d.subscribe("t", "s", retry(func() float64 { return 0 }))
		d.restart()
		s, err := d.Subscribe("t", "s", retry(func() float64 { return 0.999999 })) // takes half the delay off
		require.NoError(t, err)
		d.publish("t", "a")
		require.NoError(t, s.Fail(pollOneDur(t, s).LeaseID, errors.New("boom")))
		d.mock.Add(20*time.Second + time.Millisecond)
		require.Len(t, s.TryPoll(1), 1, "a 40s backoff with half of it jittered off by the Rand given to Subscribe")
	})
}

// TestDurableRemovalsPersist: Unsubscribe, DeleteTopic and Purge are not
// undone by a restart; the dead letters of what they removed stay.
func TestDurableRemovalsPersist(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	keep := d.subscribe("a", "keep")
	gone := d.subscribe("a", "gone")
	x := d.subscribe("b", "x")
	p := d.subscribe("c", "p")
	reject := func(s *broker.Subscription[string], want string) {
		t.Helper()
		dv := pollOneDur(t, s)
		require.Equal(t, want, dv.Payload)
		require.NoError(t, s.Reject(dv.LeaseID, nil))
	}
	d.publish("a", "a1")
	reject(gone, "a1")
	d.publish("a", "a2")
	require.Equal(t, []string{"a1/1", "a2/1"}, peek(t, keep))
	d.publish("b", "b1")
	reject(x, "b1")
	d.publish("b", "b2")
	d.publish("c", "c1")
	reject(p, "c1")
	d.publish("c", "c2")
	d.publish("c", "c3")
	pollOneDur(t, p) // in flight: purged too

	require.NoError(t, d.Unsubscribe("a", "gone"))
	require.NoError(t, d.DeleteTopic("b"))
	n, err := p.Purge()
	require.NoError(t, err)
	require.Equal(t, 2, n)

	d.restart()
	require.Equal(t, []string{"a", "c"}, d.Topics())
	subs, err := d.Subscriptions("a")
	require.NoError(t, err)
	require.Equal(t, []string{"keep"}, subs)
	_, err = d.Subscription("a", "gone")
	require.ErrorIs(t, err, broker.ErrSubscriptionNotFound)
	_, err = d.Subscription("b", "x")
	require.ErrorIs(t, err, broker.ErrTopicNotFound)
	require.Empty(t, d.sub("c", "p").TryPoll(10))
	require.Zero(t, d.sub("c", "p").Stats().Published)
	require.Equal(t, []string{"a1/1", "a2/1"}, peek(t, d.sub("a", "keep")))
	require.Equal(t, []string{"a1", "b1", "c1"}, deadPayloads(d.Broker))
	require.Equal(t, broker.RecoveryInfo{Records: d.Recovery().Records, Topics: 2, Subscriptions: 2, Messages: 2, DeadLetters: 3}, d.Recovery())

	// The same through a snapshot: the dead letters of removed
	// subscriptions and topics are kept by compaction.
	require.NoError(t, d.Compact())
	d.restart()
	require.Equal(t, []string{"a", "c"}, d.Topics())
	require.Equal(t, []string{"a1", "b1", "c1"}, deadPayloads(d.Broker))
	require.Equal(t, []string{"a1/1", "a2/1"}, peek(t, d.sub("a", "keep")))
	require.Empty(t, d.sub("c", "p").TryPoll(10))

	// A new subscription of the old name starts empty; the old one's dead
	// letter can be redriven to it, and stays there across a restart.
	again, err := d.Subscribe("a", "gone")
	require.NoError(t, err)
	require.Empty(t, again.TryPoll(10))
	n, err = d.Redrive(func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload == "a1" })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	d.restart()
	require.Equal(t, []string{"b1", "c1"}, deadPayloads(d.Broker))
	require.Equal(t, []string{"a1/1"}, peek(t, d.sub("a", "gone")))
	require.Equal(t, []string{"a1/1", "a2/1"}, peek(t, d.sub("a", "keep")))

	// A recovered subscription can be removed before it is declared again.
	require.NoError(t, d.Unsubscribe("a", "keep"))
	d.restart()
	subs, err = d.Subscriptions("a")
	require.NoError(t, err)
	require.Equal(t, []string{"gone"}, subs)

	t.Run("wildcard subscription keeps a deleted topic's messages", func(t *testing.T) {
		d := openDur[string](t, queue.StringCodec())
		require.NoError(t, d.CreateTopic("x.a"))
		require.NoError(t, d.CreateTopic("x.b"))
		_, err := d.Subscribe("x.*", "all")
		require.NoError(t, err)
		d.publish("x.a", "a")
		d.publish("x.b", "b")
		require.NoError(t, d.DeleteTopic("x.a"))
		d.restart()
		require.Equal(t, []string{"x.b"}, d.Topics())
		require.Equal(t, []string{"a/1", "b/1"}, peek(t, d.sub("x.*", "all")))
	})
	t.Run("overflow policies", func(t *testing.T) {
		d := openDur[string](t, queue.StringCodec())
		drop := d.subscribe("t", "drop", broker.WithMaxQueue(2), broker.WithOverflow(queue.OverflowDropOldest))
		d.subscribe("t", "reject", broker.WithMaxQueue(2), broker.WithOverflow(queue.OverflowReject))
		d.publish("t", "m1")
		d.publish("t", "m2")
		_, err := d.Publish(context.Background(), "t", "m3")
		require.ErrorIs(t, err, queue.ErrQueueFull) // "reject" refuses it, "drop" drops m1
		require.Equal(t, uint64(1), drop.Stats().Dropped)
		d.restart()
		require.Equal(t, []string{"m2/1", "m3/1"}, peek(t, d.sub("t", "drop")))
		require.Equal(t, []string{"m1/1", "m2/1"}, peek(t, d.sub("t", "reject")))
		require.Empty(t, d.DeadLetters())
	})
}

// TestDurableFanOut: each subscription of a topic keeps its own copy; an
// ack on one does not remove the message from the other.
func TestDurableFanOut(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	a := d.subscribe("t", "a")
	d.subscribe("t", "b")
	d.publish("t", "m1")
	d.publish("t", "m2")
	d.publish("t", "m3")
	require.NoError(t, a.Ack(pollOneDur(t, a).LeaseID))

	d.restart()
	require.Equal(t, 5, d.Recovery().Messages)
	require.Equal(t, []string{"m2/1", "m3/1"}, peek(t, d.sub("t", "a")))
	require.Equal(t, []string{"m1/1", "m2/1", "m3/1"}, peek(t, d.sub("t", "b")))

	// A subscription made after a restart is a new one, and persists.
	d.subscribe("t", "c")
	d.publish("t", "m4")
	d.restart()
	require.Equal(t, 3, d.Recovery().Subscriptions)
	require.Equal(t, []string{"m2/1", "m3/1", "m4/1"}, peek(t, d.sub("t", "a")))
	require.Equal(t, []string{"m1/1", "m2/1", "m3/1", "m4/1"}, peek(t, d.sub("t", "b")))
	require.Equal(t, []string{"m4/1"}, peek(t, d.sub("t", "c")))
}
