package leasebus_test

// The behaviour spec of a subscription's queue, through the public API:
// fan-out, copies, priorities, filters, overflow policies, MaxInFlight,
// delays, redrive and the counters. lease_test.go holds the lease rules;
// broker/poll_test.go and broker/lifecycle_test.go the ways to poll and
// the lifecycle.

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

func TestFanOutIsolation(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	lazy := brokertest.Subscribe(t, b, "t", "lazy")
	busy := brokertest.Subscribe(t, b, "t", "busy")
	brokertest.Publish(t, b, "t", "a", "b", "c")

	held := lazy.TryPoll(10) // leases everything and never acks
	require.Len(t, held, 3)
	for range 3 {
		d := busy.TryPoll(1)
		require.Len(t, d, 1)
		require.NoError(t, busy.Ack(d[0].LeaseID))
	}
	mock.Add(vis)
	assert.Equal(t, queue.Stats{Published: 3, Delivered: 3, Acked: 3}, busy.Stats())
	assert.Equal(t, 3, lazy.Stats().Visible)
	assert.Empty(t, busy.TryPoll(10))
}

func TestDeliveriesAreCopies(t *testing.T) {
	type order struct{ Qty int }
	b, _ := brokertest.New[order](t)
	s1 := brokertest.Subscribe(t, b, "t", "one")
	s2 := brokertest.Subscribe(t, b, "t", "two")
	h := map[string]string{"k": "v"}
	_, err := b.Publish(ctx, "t", order{Qty: 1}, broker.WithHeaders(h))
	require.NoError(t, err)
	h["k"] = "changed by publisher"

	d1 := s1.TryPoll(1)[0]
	d1.Payload.Qty = 99
	d1.Topic = "mutated"
	d2 := s2.TryPoll(1)[0]
	assert.Equal(t, 1, d2.Payload.Qty)
	assert.Equal(t, "t", d2.Topic)
	assert.Equal(t, "v", d2.Headers.Get("k"))
	assert.Equal(t, 1, d2.Headers.Len())
}

func TestHeadersOfSeveralOptionsAddUp(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	mine := map[string]string{"tenant": "acme", "traceparent": "mine"}
	_, err := b.Publish(ctx, "t", "m", broker.WithHeaders(mine), broker.WithHeaders(nil),
		broker.WithHeaders(map[string]string{"traceparent": "00-abc-def-01", "tracestate": "x=1"}))
	require.NoError(t, err)
	h := s.TryPoll(1)[0].Headers
	assert.Equal(t, "map[tenant:acme traceparent:00-abc-def-01 tracestate:x=1]", h.String(), "a later value wins")
	assert.Equal(t, map[string]string{"tenant": "acme", "traceparent": "mine"}, mine, "the caller's map is not written")
}

func TestPriorityThenFIFOIncludingRedeliveries(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s")
	pub := func(p string, prio queue.Priority) {
		_, err := b.Publish(ctx, "t", p, broker.WithPriority(prio))
		require.NoError(t, err)
	}
	pub("n1", queue.PriorityNormal)
	pub("l1", queue.PriorityLow)
	pub("h1", queue.PriorityHigh)
	pub("n2", queue.PriorityNormal)
	pub("c1", queue.PriorityCritical)
	pub("h2", queue.PriorityHigh)

	first := s.TryPoll(3) // c1 h1 h2
	assert.Equal(t, []string{"c1", "h1", "h2"}, payloads(first))
	pub("h3", queue.PriorityHigh)
	mock.Add(vis) // c1 h1 h2 come back and keep their places ahead of h3
	got := s.TryPoll(10)
	assert.Equal(t, []string{"c1", "h1", "h2", "h3", "n1", "n2", "l1"}, payloads(got))

	// A nacked normal message slots back in before later normal ones.
	for _, d := range got {
		if d.Payload != "n1" && d.Payload != "n2" {
			require.NoError(t, s.Ack(d.LeaseID))
		}
	}
	for _, d := range got {
		if d.Payload == "n2" {
			require.NoError(t, s.Nack(d.LeaseID, 0))
		}
	}
	pub("n3", queue.PriorityNormal)
	for _, d := range got {
		if d.Payload == "n1" {
			require.NoError(t, s.Nack(d.LeaseID, 0))
		}
	}
	assert.Equal(t, []string{"n1", "n2", "n3"}, payloads(s.TryPoll(10)))
}

func TestInvalidPriority(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	_, err := b.Publish(ctx, "t", "x", broker.WithPriority(queue.Priority(7)))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
	assert.Equal(t, queue.Stats{}, s.Stats())
}

func TestFilter(t *testing.T) {
	b, _ := brokertest.New[int](t)
	require.NoError(t, b.CreateTopic("n"))
	even, err := b.Subscribe("n", "even", broker.WithFilter(func(m queue.Message[int]) bool { return m.Payload%2 == 0 }))
	require.NoError(t, err)
	all := brokertest.Subscribe(t, b, "n", "all")
	for i := range 6 {
		brokertest.Publish(t, b, "n", i)
	}
	assert.Equal(t, []int{0, 2, 4}, payloads(even.TryPoll(10)))
	assert.Equal(t, uint64(3), even.Stats().Published)
	assert.Len(t, all.TryPoll(10), 6)

	_, err = b.Subscribe("n", "wrong", broker.WithFilter(func(queue.Message[string]) bool { return true }))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument, "filter of another payload type")
	_, err = b.Subscribe("n", "nil", broker.WithFilter[int](nil))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}

func TestOverflowDeadLetterIsDefault(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxQueue(2))
	brokertest.Publish(t, b, "t", 1, 2, 3)
	dls := b.DeadLetters()
	require.Len(t, dls, 1)
	assert.Equal(t, 3, dls[0].Message.Payload)
	assert.Equal(t, queue.ReasonOverflow, dls[0].Reason)
	assert.Equal(t, 0, dls[0].Attempts)
	st := s.Stats()
	assert.Equal(t, 2, st.Visible)
	assert.Equal(t, uint64(1), st.DeadLettered)
	balanced(t, st)
}

func TestOverflowReject(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "full", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject))
	roomy := brokertest.Subscribe(t, b, "t", "roomy")
	brokertest.Publish(t, b, "t", 1)
	m, err := b.Publish(ctx, "t", 2)
	require.ErrorIs(t, err, queue.ErrQueueFull)
	assert.Contains(t, err.Error(), `"full"`, "the error names the full subscription")
	assert.Equal(t, 2, m.Payload, "the message is still returned")
	assert.Len(t, roomy.TryPoll(10), 2, "other subscriptions accepted it")
	st := s.Stats()
	assert.Equal(t, uint64(1), st.Rejected)
	assert.Equal(t, uint64(1), st.Published)
	assert.Empty(t, b.DeadLetters())
	balanced(t, st)
}

func TestOverflowDropOldest(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxQueue(3), broker.WithOverflow(queue.OverflowDropOldest))
	_, err := b.Publish(ctx, "t", 0, broker.WithPriority(queue.PriorityHigh))
	require.NoError(t, err)
	brokertest.Publish(t, b, "t", 1, 2, 3, 4)
	// 1 then 2 were the oldest of the lowest priority present; the high one stays.
	assert.Equal(t, []int{0, 3, 4}, payloads(s.TryPoll(10)))
	st := s.Stats()
	assert.Equal(t, uint64(2), st.Dropped)
	balanced(t, st)

	brokertest.Publish(t, b, "t", 5) // all three in flight: nothing to drop but the newcomer
	st = s.Stats()
	assert.Equal(t, uint64(3), st.Dropped)
	assert.Equal(t, 3, st.InFlight)
	balanced(t, st)
	assert.Empty(t, b.DeadLetters())
}

func TestOverflowBlock(t *testing.T) { synctest.Test(t, testOverflowBlock) }

func testOverflowBlock(t *testing.T) {
	b, err := broker.New[int](broker.WithClock(clock.New()))
	require.NoError(t, err)
	defer b.Close()
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowBlock))
	brokertest.Publish(t, b, "t", 1)

	// A ctx done before the publish: nothing published, nothing counted.
	short, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.Publish(short, "t", 2)
	assert.Equal(t, context.Canceled, err)

	// ctx ends while the publish waits: refused, counted, nothing held
	// beyond the bound.
	short, cancel = context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.Publish(short, "t", 2)
		done <- err
	}()
	synctest.Wait() // the publisher waits for room
	cancel()
	err = <-done
	assert.ErrorIs(t, err, queue.ErrQueueFull)
	assert.ErrorIs(t, err, context.Canceled)

	go func() {
		_, err := b.Publish(ctx, "t", 3)
		done <- err
	}()
	d := s.TryPoll(1)
	require.Len(t, d, 1)
	select {
	case err := <-done:
		require.Failf(t, "publisher returned while the queue was full", "%v", err)
	default:
	}
	require.NoError(t, s.Ack(d[0].LeaseID)) // makes room
	require.NoError(t, <-done)
	assert.Equal(t, []int{3}, payloads(s.TryPoll(1)))

	go func() {
		_, err := b.Publish(ctx, "t", 4)
		done <- err
	}()
	require.NoError(t, b.Unsubscribe("t", "s"))
	require.NoError(t, <-done, "a blocked publisher whose subscription goes away is released")
	st := s.Stats()
	assert.Equal(t, uint64(1), st.Rejected)
	balanced(t, st)
}

func TestMaxInFlight(t *testing.T) {
	b, mock := brokertest.New[int](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxInFlight(2))
	brokertest.Publish(t, b, "t", 1, 2, 3, 4)
	first := s.TryPoll(10)
	assert.Equal(t, []int{1, 2}, payloads(first))
	assert.Empty(t, s.TryPoll(1))

	got := make(chan []queue.Delivery[int], 1)
	go func() {
		ds, err := s.Poll(ctx, 10)
		assert.NoError(t, err)
		got <- ds
	}()
	brokertest.AwaitParked(t, s, 1)
	require.NoError(t, s.Ack(first[0].LeaseID)) // frees one slot
	assert.Equal(t, []int{3}, payloads(<-got))

	mock.Add(vis) // 2 and 3 expire: both slots free
	assert.Equal(t, []int{2, 3}, payloads(s.TryPoll(10)))
}

func TestDelayedPublish(t *testing.T) {
	b, mock := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	_, err := b.Publish(ctx, "t", "late", broker.WithDelay(time.Minute))
	require.NoError(t, err)
	brokertest.Publish(t, b, "t", "now")
	now := s.TryPoll(10)
	assert.Equal(t, []string{"now"}, payloads(now))
	require.NoError(t, s.Ack(now[0].LeaseID))
	assert.Equal(t, 1, s.Stats().Delayed)
	mock.Add(time.Minute)
	assert.Equal(t, []string{"late"}, payloads(s.TryPoll(10)))
	_, err = b.Publish(ctx, "t", "x", broker.WithDelay(-1))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}

func TestRedriveResetsAttemptsAndKeepsPlace(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxAttempts(1))
	other := brokertest.Subscribe(t, b, "t", "other")
	brokertest.Publish(t, b, "t", "first", "second", "third")

	d := s.TryPoll(1)[0] // "first"
	require.NoError(t, s.Fail(d.LeaseID, errors.New("bad")))
	mock.Add(vis)
	require.Len(t, b.DeadLetters(), 1)

	n, err := b.Redrive(func(dl queue.DeadLetter[string]) bool { return dl.Subscription == "s" })
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Empty(t, b.DeadLetters())
	got := s.TryPoll(10)
	assert.Equal(t, []string{"first", "second", "third"}, payloads(got), "redriven message keeps its place")
	assert.Equal(t, 1, got[0].Attempt, "attempts reset")
	st := s.Stats()
	assert.Equal(t, uint64(1), st.Redriven)
	balanced(t, st)
	assert.Equal(t, 3, other.Stats().Visible, "redrive goes to the original subscription only")

	// A letter whose subscription is gone stays, and the error says why.
	require.NoError(t, s.Fail(got[1].LeaseID, errors.New("bad")))
	require.NoError(t, b.Unsubscribe("t", "s"))
	n, err = b.Redrive(func(queue.DeadLetter[string]) bool { return true })
	assert.Equal(t, 0, n)
	assert.ErrorIs(t, err, broker.ErrSubscriptionNotFound)
	assert.Len(t, b.DeadLetters(), 1)

	_, err = b.Redrive(nil)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}

func TestDeadLetterStoreIsBounded(t *testing.T) {
	b, _ := brokertest.New[int](t, broker.WithDeadLetterLimit(2))
	brokertest.Subscribe(t, b, "t", "s", broker.WithMaxQueue(1))
	brokertest.Publish(t, b, "t", 0, 1, 2, 3, 4)
	dls := b.DeadLetters()
	require.Len(t, dls, 2)
	assert.Equal(t, 3, dls[0].Message.Payload)
	assert.Equal(t, 4, dls[1].Message.Payload)
	assert.Equal(t, uint64(2), b.DeadLetterStats().Dropped)
}

func TestStatsCounters(t *testing.T) {
	b, mock := brokertest.New[int](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxAttempts(2))
	brokertest.Publish(t, b, "t", 1, 2, 3)
	_, err := b.Publish(ctx, "t", 4, broker.WithDelay(time.Hour))
	require.NoError(t, err)
	ds := s.TryPoll(2)
	require.NoError(t, s.Ack(ds[0].LeaseID))
	mock.Add(vis) // ds[1] expires, visible again
	ds = s.TryPoll(1)
	require.Equal(t, 2, ds[0].Attempt)
	require.NoError(t, s.Nack(ds[0].LeaseID, 0)) // last attempt: dead letter
	st := s.Stats()
	assert.Equal(t, queue.Stats{
		Visible: 1, Delayed: 1, InFlight: 0,
		Published: 4, Delivered: 3, Acked: 1, Redelivered: 1, DeadLettered: 1,
		DeadLetteredBy:   queue.DeadLetterCounts{MaxAttempts: 1},
		OldestVisibleAge: vis, // message 3, published before the clock moved
	}, st)
	balanced(t, st)
}

func TestStatsOldestVisibleAgeAndDeadLettersByReason(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxAttempts(2), broker.WithMaxQueue(3))
	age := func() time.Duration { return s.Stats().OldestVisibleAge }
	assert.Zero(t, age(), "nothing visible")

	brokertest.Publish(t, b, "t", "old")
	mock.Add(5 * time.Second)
	_, err := b.Publish(ctx, "t", "urgent", broker.WithPriority(queue.PriorityHigh))
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, age(), "the oldest of all priorities, not the next to go")

	old := s.TryPoll(2)
	require.Len(t, old, 2)
	assert.Zero(t, age(), "everything in flight")
	require.NoError(t, s.Ack(old[0].LeaseID))
	mock.Add(vis) // "old" expires: visible again, its PublishedAt kept
	assert.Equal(t, 5*time.Second+vis, age())

	again := s.TryPoll(1)
	require.Len(t, again, 1)
	require.NoError(t, s.Fail(again[0].LeaseID, errors.New("boom"))) // last attempt
	for _, p := range []string{"a", "b", "c", "overflow"} {
		brokertest.Publish(t, b, "t", p)
	}
	d := s.TryPoll(1)
	require.NoError(t, s.Reject(d[0].LeaseID, errors.New("poison")))
	_, err = b.Publish(ctx, "t", "short", broker.WithTTL(time.Second))
	require.NoError(t, err)
	mock.Add(time.Second)
	st := s.Stats()
	assert.Equal(t, queue.DeadLetterCounts{MaxAttempts: 1, Overflow: 1, Expired: 1, Rejected: 1}, st.DeadLetteredBy)
	assert.Equal(t, uint64(4), st.DeadLettered)
	assert.Equal(t, time.Second, st.OldestVisibleAge, `"b" and "c", published a second ago`)
}
