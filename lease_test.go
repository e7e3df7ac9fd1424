package leasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

const vis = 10 * time.Second

// setup returns a broker on a mock clock with one subscription "s" on
// topic "t" whose visibility timeout is vis, and one message published.
func setup(t *testing.T, opts ...broker.SubscribeOption) (*broker.Broker[string], *broker.Subscription[string], func(time.Duration)) {
	t.Helper()
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s", opts...)
	return b, s, mock.Add
}

func pollOne(t *testing.T, s *broker.Subscription[string]) queue.Delivery[string] {
	t.Helper()
	ds := s.TryPoll(1)
	require.Len(t, ds, 1, "expected one visible message")
	return ds[0]
}

func TestLeaseExpiresExactlyAtDeadline(t *testing.T) {
	b, s, add := setup(t)
	brokertest.Publish(t, b, "t", "m")

	d1 := pollOne(t, s)
	assert.Equal(t, 1, d1.Attempt)
	assert.Equal(t, brokertest.Epoch.Add(vis), d1.Deadline)

	add(vis - time.Nanosecond)
	assert.Empty(t, s.TryPoll(1), "still leased 1ns before the deadline")
	assert.Equal(t, 1, s.Stats().InFlight)

	add(time.Nanosecond)
	st := s.Stats()
	assert.Equal(t, 0, st.InFlight)
	assert.Equal(t, 1, st.Visible)
	d2 := pollOne(t, s)
	assert.Equal(t, 2, d2.Attempt)
	assert.NotEqual(t, d1.LeaseID, d2.LeaseID, "a redelivery gets a fresh lease")
	assert.Equal(t, d1.ID, d2.ID)
	assert.Equal(t, uint64(1), s.Stats().Redelivered)
}

func TestExtendMovesDeadline(t *testing.T) {
	b, s, add := setup(t)
	brokertest.Publish(t, b, "t", "m")
	d := pollOne(t, s)

	add(vis / 2)
	require.NoError(t, s.Extend(d.LeaseID, vis)) // new deadline: 5s + 10s
	add(vis/2 + time.Second)                     // 11s: past the old deadline
	assert.Empty(t, s.TryPoll(1))
	add(vis/2 - time.Second - time.Nanosecond) // 15s - 1ns
	assert.Empty(t, s.TryPoll(1))
	add(time.Nanosecond) // 15s: expired
	assert.ErrorIs(t, s.Extend(d.LeaseID, vis), queue.ErrLeaseExpired)
	assert.Equal(t, 2, pollOne(t, s).Attempt)
}

func TestExtendRejectsBadTimeouts(t *testing.T) {
	b, s, _ := setup(t)
	brokertest.Publish(t, b, "t", "m")
	d := pollOne(t, s)
	for _, timeout := range []time.Duration{0, -time.Second} {
		assert.ErrorIs(t, s.Extend(d.LeaseID, timeout), queue.ErrInvalidArgument, "timeout %v", timeout)
	}
	assert.Equal(t, 1, s.Stats().InFlight, "a bad Extend changes nothing")
}

func TestNackWithDelay(t *testing.T) {
	b, s, add := setup(t)
	brokertest.Publish(t, b, "t", "m")
	d := pollOne(t, s)

	require.NoError(t, s.Nack(d.LeaseID, 5*time.Second))
	st := s.Stats()
	assert.Equal(t, 1, st.Delayed)
	assert.Equal(t, 0, st.InFlight)
	add(5*time.Second - time.Nanosecond)
	assert.Empty(t, s.TryPoll(1))
	add(time.Nanosecond)
	d2 := pollOne(t, s)
	assert.Equal(t, 2, d2.Attempt)

	require.NoError(t, s.Nack(d2.LeaseID, 0))
	assert.Equal(t, 3, pollOne(t, s).Attempt, "Nack(0) is visible at once")

	assert.ErrorIs(t, s.Nack(d2.LeaseID, 0), queue.ErrLeaseExpired, "a settled lease whose message is still held")
	assert.ErrorIs(t, s.Nack(d2.LeaseID, -time.Second), queue.ErrInvalidArgument)
}

func TestNackAndExtendNeedNowBeforeDeadline(t *testing.T) {
	b, s, add := setup(t)
	brokertest.Publish(t, b, "t", "m")
	d := pollOne(t, s)
	add(vis) // now == Deadline
	assert.ErrorIs(t, s.Nack(d.LeaseID, 0), queue.ErrLeaseExpired)
	assert.ErrorIs(t, s.Extend(d.LeaseID, vis), queue.ErrLeaseExpired)
	assert.ErrorIs(t, s.Release(d.LeaseID), queue.ErrLeaseExpired)
	assert.ErrorIs(t, s.Fail(d.LeaseID, errors.New("x")), queue.ErrLeaseExpired)
	assert.Equal(t, queue.Stats{Visible: 1, Published: 1, Delivered: 1, OldestVisibleAge: vis}, s.Stats())
}

func TestLateAckBeforeRedeliverySucceeds(t *testing.T) {
	b, s, add := setup(t)
	brokertest.Publish(t, b, "t", "m")
	d := pollOne(t, s)
	add(vis + time.Hour) // long expired, but nobody polled again
	require.NoError(t, s.Ack(d.LeaseID))
	st := s.Stats()
	assert.Equal(t, uint64(1), st.Acked)
	assert.Equal(t, 0, st.Visible)
	assert.Empty(t, s.TryPoll(1), "a late ack saves the duplicate")
	assert.ErrorIs(t, s.Ack(d.LeaseID), queue.ErrLeaseNotFound)
}

func TestAckOfSupersededLease(t *testing.T) {
	b, s, add := setup(t)
	brokertest.Publish(t, b, "t", "m")
	old := pollOne(t, s)
	add(vis)
	cur := pollOne(t, s)

	assert.ErrorIs(t, s.Ack(old.LeaseID), queue.ErrLeaseExpired, "the new holder owns it")
	assert.Equal(t, 1, s.Stats().InFlight, "and nothing changed")
	require.NoError(t, s.Ack(cur.LeaseID))
	assert.ErrorIs(t, s.Ack(old.LeaseID), queue.ErrLeaseNotFound, "message gone")
}

func TestDoubleAck(t *testing.T) {
	b, s, _ := setup(t)
	brokertest.Publish(t, b, "t", "m")
	d := pollOne(t, s)
	require.NoError(t, s.Ack(d.LeaseID))
	err := s.Ack(d.LeaseID)
	assert.ErrorIs(t, err, queue.ErrLeaseNotFound)
	assert.Contains(t, err.Error(), d.LeaseID.String(), "the error names the lease")
	assert.Equal(t, uint64(1), s.Stats().Acked)
}

func TestUnknownAndForeignLeases(t *testing.T) {
	b, s, _ := setup(t)
	other := brokertest.Subscribe(t, b, "t", "other")
	brokertest.Publish(t, b, "t", "m")
	d := pollOne(t, s)
	pollOne(t, other)

	for name, id := range map[string]lease.ID{
		"zero":         {},
		"foreign":      lease.NewID(d.LeaseID.Scope()^1, d.LeaseID.Seq(), 1),
		"never issued": lease.NewID(d.LeaseID.Scope(), d.LeaseID.Seq(), 2),
		"no message":   lease.NewID(d.LeaseID.Scope(), 999, 1),
	} {
		assert.ErrorIs(t, s.Ack(id), queue.ErrLeaseNotFound, name)
		assert.ErrorIs(t, other.Ack(id), queue.ErrLeaseNotFound, name)
	}
	assert.ErrorIs(t, other.Ack(d.LeaseID), queue.ErrLeaseNotFound, "a lease of another subscription")
	assert.Equal(t, 1, s.Stats().InFlight)
	assert.Equal(t, 1, other.Stats().InFlight)
}

func TestReleaseSpendsNoAttempt(t *testing.T) {
	b, s, _ := setup(t, broker.WithMaxAttempts(1))
	brokertest.Publish(t, b, "t", "m")
	for range 3 {
		d := pollOne(t, s)
		assert.Equal(t, 1, d.Attempt)
		require.NoError(t, s.Release(d.LeaseID))
	}
	st := s.Stats()
	assert.Equal(t, uint64(3), st.Delivered)
	assert.Equal(t, uint64(0), st.Redelivered)
	assert.Equal(t, uint64(0), st.DeadLettered)
}

func TestDeadLetterAfterMaxAttemptsByExpiry(t *testing.T) {
	b, s, add := setup(t, broker.WithMaxAttempts(3))
	m := brokertest.Publish(t, b, "t", "poison")[0]
	for attempt := 1; attempt <= 3; attempt++ {
		d := pollOne(t, s)
		require.Equal(t, attempt, d.Attempt)
		add(vis)
	}
	assert.Empty(t, s.TryPoll(1))
	dls := b.DeadLetters()
	require.Len(t, dls, 1)
	dl := dls[0]
	assert.Equal(t, "s", dl.Subscription)
	assert.Equal(t, m, dl.Message)
	assert.Equal(t, queue.ReasonMaxAttempts, dl.Reason)
	assert.Equal(t, 3, dl.Attempts)
	assert.Equal(t, "lease expired", dl.LastError)
	assert.Equal(t, brokertest.Epoch.Add(3*vis), dl.At)
	assert.Equal(t, uint64(1), s.Stats().DeadLettered)
}

func TestDeadLetterAfterMaxAttemptsByNackAndFail(t *testing.T) {
	b, s, add := setup(t, broker.WithMaxAttempts(2), broker.WithRetry(queue.RetryPolicy{Initial: time.Second}))
	brokertest.Publish(t, b, "t", "m")

	d := pollOne(t, s)
	require.NoError(t, s.Fail(d.LeaseID, errors.New("disk full")))
	assert.Equal(t, 1, s.Stats().Delayed, "Fail waits the retry policy's delay")
	add(time.Second - time.Nanosecond)
	assert.Empty(t, s.TryPoll(1))
	add(time.Nanosecond)
	d = pollOne(t, s)
	require.Equal(t, 2, d.Attempt)
	require.NoError(t, s.Fail(d.LeaseID, errors.New("disk still full")))

	dls := b.DeadLetters()
	require.Len(t, dls, 1)
	assert.Equal(t, queue.ReasonMaxAttempts, dls[0].Reason)
	assert.Equal(t, 2, dls[0].Attempts)
	assert.Equal(t, "disk still full", dls[0].LastError)
	assert.ErrorIs(t, s.Ack(d.LeaseID), queue.ErrLeaseNotFound, "dead-lettered")

	brokertest.Publish(t, b, "t", "n")
	d = pollOne(t, s)
	require.NoError(t, s.Nack(d.LeaseID, 0))
	d = pollOne(t, s)
	require.NoError(t, s.Nack(d.LeaseID, time.Hour))
	require.Len(t, b.DeadLetters(), 2, "a Nack on the last attempt dead-letters at once")
}

func TestRejectDeadLettersAtOnce(t *testing.T) {
	b, s, _ := setup(t)
	brokertest.Publish(t, b, "t", "m")
	d := pollOne(t, s)
	require.NoError(t, s.Reject(d.LeaseID, errors.New("malformed")))
	dls := b.DeadLetters()
	require.Len(t, dls, 1)
	assert.Equal(t, queue.ReasonRejected, dls[0].Reason)
	assert.Equal(t, 1, dls[0].Attempts)
	assert.Equal(t, "malformed", dls[0].LastError)
}

func TestBlockedPollWokenByExpiry(t *testing.T) {
	b, s, add := setup(t)
	brokertest.Publish(t, b, "t", "m")
	first := pollOne(t, s)

	got := make(chan []queue.Delivery[string], 1)
	go func() {
		ds, err := s.Poll(context.Background(), 1)
		assert.NoError(t, err)
		got <- ds
	}()
	brokertest.AwaitParked(t, s, 1)
	add(vis)
	ds := <-got
	require.Len(t, ds, 1)
	assert.Equal(t, 2, ds[0].Attempt)
	assert.Equal(t, first.ID, ds[0].ID)
}

func TestBlockedPollWokenByDelayedMessage(t *testing.T) {
	b, s, add := setup(t)
	_, err := b.Publish(context.Background(), "t", "later", broker.WithDelay(time.Minute))
	require.NoError(t, err)

	got := make(chan queue.Delivery[string], 1)
	go func() {
		ds, err := s.Poll(context.Background(), 5)
		assert.NoError(t, err)
		got <- ds[0]
	}()
	brokertest.AwaitParked(t, s, 1)
	add(time.Minute - time.Nanosecond)
	assert.NoError(t, s.AwaitParked(canceled(), 1), "not due yet: still parked")
	add(time.Nanosecond)
	assert.Equal(t, "later", (<-got).Payload)
}

func TestLeaseIDIsPrintableAndParses(t *testing.T) {
	b, s, _ := setup(t)
	brokertest.Publish(t, b, "t", "m")
	d := pollOne(t, s)
	back, err := lease.ParseID(d.LeaseID.String())
	require.NoError(t, err)
	assert.Equal(t, d.LeaseID, back)
	require.NoError(t, s.Ack(back), "a parsed receipt acks")
}
