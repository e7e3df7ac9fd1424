package broker_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

// stages returns a broker with topics "in" and "out", subscriptions
// in/work and out/next, and "job" published to "in".
func stages(t *testing.T) (*broker.Broker[string], *broker.Subscription[string], *broker.Subscription[string]) {
	t.Helper()
	b, err := broker.New[string]()
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return declareStages(t, b)
}

func declareStages(t *testing.T, b *broker.Broker[string]) (*broker.Broker[string], *broker.Subscription[string], *broker.Subscription[string]) {
	t.Helper()
	for _, topic := range []string{"in", "out", "nobody"} {
		require.NoError(t, b.CreateTopic(topic))
	}
	work, err := b.Subscribe("in", "work")
	require.NoError(t, err)
	next, err := b.Subscribe("out", "next")
	require.NoError(t, err)
	return b, work, next
}

// Forward acks the lease and publishes in its place, with the options.
func TestForwardMovesTheMessage(t *testing.T) {
	b, work, next := stages(t)
	_, err := b.Publish(ctx, "in", "job")
	require.NoError(t, err)
	ds := work.TryPoll(1)
	require.Len(t, ds, 1)
	m, err := work.Forward(ctx, ds[0].LeaseID, "out", "job, stage 2", broker.WithKey("k"), broker.WithPriority(queue.PriorityHigh))
	require.NoError(t, err)
	require.Equal(t, "out", m.Topic)
	got := next.TryPoll(10)
	require.Len(t, got, 1)
	require.Equal(t, "job, stage 2", got[0].Payload)
	require.Equal(t, m.ID, got[0].ID)
	require.Equal(t, "k", got[0].Key)
	require.Equal(t, queue.PriorityHigh, got[0].Priority)
	st := work.Stats()
	require.Equal(t, uint64(1), st.Acked)
	require.Zero(t, st.Visible+st.InFlight+st.Delayed)
	require.ErrorIs(t, work.Ack(ds[0].LeaseID), queue.ErrLeaseNotFound, "settled: a second settle finds nothing")
}

// Every refusal changes nothing: the lease stays current and nothing is
// published.
func TestForwardRefusalsChangeNothing(t *testing.T) {
	b, work, next := stages(t)
	_, err := b.Publish(ctx, "in", "job")
	require.NoError(t, err)
	ds := work.TryPoll(1)
	require.Len(t, ds, 1)
	id := ds[0].LeaseID
	for name, c := range map[string]struct {
		call func() error
		want error
	}{
		"no subscription on the topic": {func() error { _, err := work.Forward(ctx, id, "nobody", "x"); return err }, broker.ErrNotForwarded},
		"no such topic":                {func() error { _, err := work.Forward(ctx, id, "nope", "x"); return err }, broker.ErrTopicNotFound},
		"a bad option":                 {func() error { _, err := work.Forward(ctx, id, "out", "x", broker.WithTTL(-1)); return err }, queue.ErrInvalidArgument},
		"nil context": {func() error {
			//lint:ignore SA1012 a nil context is the invalid input under test
			_, err := work.Forward(nil, id, "out", "x")
			return err
		}, queue.ErrInvalidArgument},
	} {
		require.ErrorIs(t, c.call(), c.want, name)
		require.Empty(t, next.TryPoll(10), "%s: nothing published", name)
		require.Equal(t, 1, work.Stats().InFlight, "%s: the lease stays", name)
	}
	require.NoError(t, work.Ack(id), "the lease is still current")
	_, err = work.Forward(ctx, id, "out", "x")
	require.ErrorIs(t, err, queue.ErrLeaseNotFound, "settled already")
	require.Empty(t, next.TryPoll(10))
}

// A lease whose message was delivered again is not current: Forward
// returns ErrLeaseExpired and publishes nothing.
func TestForwardOfAnExpiredLease(t *testing.T) {
	b, mock := brokertest.New[string](t)
	_, work, next := declareStages(t, b)
	_, err := b.Publish(ctx, "in", "job")
	require.NoError(t, err)
	first := work.TryPoll(1)
	require.Len(t, first, 1)
	mock.Add(work.Config().VisibilityTimeout)
	require.Len(t, work.TryPoll(1), 1, "delivered again")
	_, err = work.Forward(ctx, first[0].LeaseID, "out", "x")
	require.ErrorIs(t, err, queue.ErrLeaseExpired)
	require.Empty(t, next.TryPoll(10))
}

// With a dedup ID that names a message already published, Forward acks
// the lease and returns that message: forwarding again after a crash
// queues nothing twice.
func TestForwardWithDedupID(t *testing.T) {
	b, work, next := stages(t)
	for range 2 {
		_, err := b.Publish(ctx, "in", "job")
		require.NoError(t, err)
	}
	ds := work.TryPoll(2)
	require.Len(t, ds, 2)
	first, err := work.Forward(ctx, ds[0].LeaseID, "out", "once", broker.WithDedupID("job-1"))
	require.NoError(t, err)
	again, err := work.Forward(ctx, ds[1].LeaseID, "out", "twice", broker.WithDedupID("job-1"))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, []string{"once"}, payloads(next.TryPoll(10)))
	require.Equal(t, uint64(2), work.Stats().Acked)
}

// On a durable broker a Forward is one record: cut anywhere in what it
// wrote, the message is in one place, never two, never none.
func TestDurableForwardIsAtomic(t *testing.T) {
	cutEvery(t, func(b *broker.Broker[string]) {
		declareStages(t, b)
		_, err := b.Publish(context.Background(), "in", "job")
		require.NoError(t, err)
	}, func(b *broker.Broker[string]) {
		work, err := b.Subscription("in", "work")
		require.NoError(t, err)
		ds := work.TryPoll(1)
		require.Len(t, ds, 1)
		_, err = work.Forward(context.Background(), ds[0].LeaseID, "out", "job, stage 2")
		require.NoError(t, err)
	}, func(b *broker.Broker[string], whole bool) {
		_, work, next := declareStages(t, b)
		in, out := payloads(work.TryPoll(10)), payloads(next.TryPoll(10))
		require.Equal(t, 1, len(in)+len(out), "one place, never two or none: in %q, out %q", in, out)
		if whole {
			require.Equal(t, []string{"job, stage 2"}, out)
		}
	})
}

// A compaction between Forwards, and a reopen, keep each message in one
// place.
func TestDurableForwardAcrossCompaction(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	_, work, _ := declareStages(t, b)
	for range 10 {
		_, err := b.Publish(ctx, "in", "job")
		require.NoError(t, err)
	}
	ds := work.TryPoll(10)
	require.Len(t, ds, 10)
	for i, d := range ds {
		if i == 5 {
			require.NoError(t, b.Compact())
		}
		_, err := work.Forward(ctx, d.LeaseID, "out", "moved")
		require.NoError(t, err)
	}
	require.NoError(t, b.Close())
	r, err := broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	defer r.Close()
	_, work, next := declareStages(t, r)
	require.Empty(t, work.TryPoll(10))
	require.Len(t, next.TryPoll(20), 10)
}
