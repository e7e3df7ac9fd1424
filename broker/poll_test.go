package broker_test

// Polling through the public API: contexts, buffers, parked pollers, the
// real clock in a synctest bubble, and many publishers and consumers at once.

import (
	"context"
	"sync"
	"sync/atomic"
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

func TestPollContext(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	brokertest.Publish(t, b, "t", 1)

	done, cancel := context.WithCancel(ctx)
	cancel()
	ds, err := s.Poll(done, 1)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, ds)
	assert.Equal(t, 1, s.Stats().Visible, "a done ctx leases nothing")

	require.Len(t, s.TryPoll(1), 1)
	waiting, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Poll(waiting, 1)
		errc <- err
	}()
	brokertest.AwaitParked(t, s, 1)
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
	assert.ErrorIs(t, s.AwaitParked(canceled(), 1), context.Canceled, "the canceled Poll is no longer parked")

	_, err = s.Poll(ctx, 0)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
	assert.Nil(t, s.TryPoll(-1))
	_, err = s.TryPollInto(nil)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}

func TestPollIntoReusesBuffer(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	brokertest.Publish(t, b, "t", 1, 2, 3)
	buf := make([]queue.Delivery[int], 2)
	n, err := s.PollInto(ctx, buf)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, []int{1, 2}, payloads(buf[:n]))
	n, err = s.TryPollInto(buf)
	require.NoError(t, err)
	assert.Equal(t, []int{3}, payloads(buf[:n]))
}

// TestAwaitParkedAfterPublishWaitsForThePollerToParkAgain: a publish wakes
// the parked poller, which stops counting at once, so AwaitParked right
// after it returns only once the poller has taken the message and parked
// again.
func TestAwaitParkedAfterPublishWaitsForThePollerToParkAgain(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	got := make(chan int, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ds, err := s.Poll(ctx, 1)
			if err != nil {
				return
			}
			got <- ds[0].Payload
		}
	}()
	for i := range 50 {
		brokertest.AwaitParked(t, s, 1)
		brokertest.Publish(t, b, "t", i) // wakes the poller: it stops counting as parked at once
		brokertest.AwaitParked(t, s, 1)
		select {
		case v := <-got:
			require.Equal(t, i, v)
		default:
			require.Failf(t, "AwaitParked returned too early", "before the poller took message %d", i)
		}
	}
	require.NoError(t, b.Close())
	<-done
}

// TestRunsInSynctest drives redelivery with the real clock inside a
// testing/synctest bubble: time is virtual, and nothing sleeps for real.
func TestRunsInSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := broker.New[string](broker.WithClock(clock.New()), broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(time.Hour)))
		require.NoError(t, err)
		defer b.Close()
		require.NoError(t, b.CreateTopic("t"))
		s, err := b.Subscribe("t", "s")
		require.NoError(t, err)
		start := time.Now()
		_, err = b.Publish(ctx, "t", "m")
		require.NoError(t, err)
		first, err := s.Poll(ctx, 1)
		require.NoError(t, err)
		again, err := s.Poll(ctx, 1) // blocks until the lease expires, an hour of bubble time
		require.NoError(t, err)
		assert.Equal(t, 2, again[0].Attempt)
		assert.Equal(t, first[0].ID, again[0].ID)
		assert.Equal(t, time.Hour, time.Since(start))
		require.NoError(t, s.Ack(again[0].LeaseID))
	})
}

func TestConcurrentPublishersAndConsumers(t *testing.T) {
	const publishers, consumers, perPublisher = 4, 4, 2_000
	b, err := broker.New[int](broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(time.Minute)))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	s, err := b.Subscribe("t", "s")
	require.NoError(t, err)

	var seen sync.Map
	var acked atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range consumers {
		wg.Go(func() {
			buf := make([]queue.Delivery[int], 16)
			for {
				n, err := s.PollInto(cctx, buf)
				if err != nil {
					return
				}
				for _, d := range buf[:n] {
					_, dup := seen.LoadOrStore(d.Payload, true)
					assert.False(t, dup, "message %d delivered twice", d.Payload)
					assert.NoError(t, s.Ack(d.LeaseID), "ack %d", d.Payload)
					if acked.Add(1) == publishers*perPublisher {
						cancel()
					}
				}
			}
		})
	}
	var pubs sync.WaitGroup
	for p := range publishers {
		pubs.Go(func() {
			for i := range perPublisher {
				_, err := b.Publish(ctx, "t", p*perPublisher+i)
				assert.NoError(t, err, "publish")
			}
		})
	}
	pubs.Wait()
	wg.Wait()
	st := s.Stats()
	assert.Equal(t, uint64(publishers*perPublisher), st.Acked)
	assert.Equal(t, uint64(publishers*perPublisher), st.Delivered)
	assert.Equal(t, 0, st.Visible+st.InFlight+st.Delayed)
	for i := range publishers * perPublisher {
		_, ok := seen.Load(i)
		require.True(t, ok, "message %d lost", i)
	}
}
