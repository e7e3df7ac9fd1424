package leasebus_test

import (
	"context"
	"errors"
	"strings"
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
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

var ctx = context.Background()

func payloads[T any](ds []queue.Delivery[T]) []T {
	out := make([]T, len(ds))
	for i, d := range ds {
		out[i] = d.Payload
	}
	return out
}

// balanced checks the conservation invariant of a subscription's stats.
func balanced(t *testing.T, st queue.Stats) {
	t.Helper()
	in := st.Published + st.Redriven
	out := st.Acked + st.DeadLettered + st.Dropped + uint64(st.Visible+st.Delayed+st.InFlight+st.HeldBack)
	assert.Equal(t, in, out, "published+redriven must equal acked+dead+dropped+held: %+v", st)
}

func TestFanOutIsolation(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithVisibilityTimeout(vis))
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

func TestPriorityThenFIFOIncludingRedeliveries(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithVisibilityTimeout(vis))
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

func TestOverflowBlock(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowBlock))
	brokertest.Publish(t, b, "t", 1)

	// ctx ends first: refused, counted, nothing held beyond the bound.
	short, cancel := context.WithCancel(ctx)
	cancel()
	_, err := b.Publish(short, "t", 2)
	assert.ErrorIs(t, err, queue.ErrQueueFull)
	assert.ErrorIs(t, err, context.Canceled)

	done := make(chan error, 1)
	go func() {
		_, err := b.Publish(ctx, "t", 3)
		done <- err
	}()
	d := s.TryPoll(1)
	require.Len(t, d, 1)
	select {
	case err := <-done:
		t.Fatalf("publisher returned while the queue was full: %v", err)
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
	b, mock := brokertest.New[int](t, broker.WithVisibilityTimeout(vis))
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
	b, mock := brokertest.New[string](t, broker.WithVisibilityTimeout(vis))
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
	assert.Equal(t, uint64(2), b.DeadLettersDropped())
}

func TestStatsCounters(t *testing.T) {
	b, mock := brokertest.New[int](t, broker.WithVisibilityTimeout(vis))
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
	}, st)
	balanced(t, st)
}

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
		"zero visibility":    broker.WithVisibilityTimeout(0),
		"negative vis":       broker.WithVisibilityTimeout(-time.Second),
		"zero attempts":      broker.WithMaxAttempts(0),
		"negative attempts":  broker.WithMaxAttempts(-2),
		"zero queue":         broker.WithMaxQueue(0),
		"bad overflow":       broker.WithOverflow(queue.OverflowPolicy(42)),
		"zero in flight":     broker.WithMaxInFlight(0),
		"negative retry":     broker.WithRetry(queue.RetryPolicy{Initial: -1}),
		"jitter above one":   broker.WithRetry(queue.RetryPolicy{Jitter: 2}),
		"multiplier below 1": broker.WithRetry(queue.RetryPolicy{Multiplier: 0.5}),
		"zero DLQ limit":     broker.WithDeadLetterLimit(0),
		"nil option":         nil,
	}
	for name, opt := range cases {
		_, err := broker.New[int](opt)
		assert.ErrorIs(t, err, queue.ErrInvalidArgument, name)
	}
	b, err := broker.New[int](broker.WithMaxAttempts(queue.UnlimitedAttempts))
	require.NoError(t, err)
	require.NoError(t, b.Close())
}

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

func TestConcurrentPublishersAndConsumers(t *testing.T) {
	const publishers, consumers, perPublisher = 4, 4, 2_000
	b, err := broker.New[int](broker.WithVisibilityTimeout(time.Minute))
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
					if _, dup := seen.LoadOrStore(d.Payload, true); dup {
						t.Errorf("message %d delivered twice", d.Payload)
					}
					if err := s.Ack(d.LeaseID); err != nil {
						t.Errorf("ack %d: %v", d.Payload, err)
					}
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
				if _, err := b.Publish(ctx, "t", p*perPublisher+i); err != nil {
					t.Errorf("publish: %v", err)
				}
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
		if _, ok := seen.Load(i); !ok {
			t.Fatalf("message %d lost", i)
		}
	}
}

// TestRunsInSynctest drives redelivery with the real clock inside a
// testing/synctest bubble: time is virtual, and nothing sleeps for real.
func TestRunsInSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := broker.New[string](broker.WithClock(clock.New()), broker.WithVisibilityTimeout(time.Hour))
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

func lease0() lease.ID { return lease.ID{} }

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
			t.Fatalf("AwaitParked returned before the poller took message %d", i)
		}
	}
	require.NoError(t, b.Close())
	<-done
}
