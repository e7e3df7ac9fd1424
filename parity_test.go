package leasebus_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/internal/vocab"
	"github.com/leasebus/leasebus/poller"
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
	b, mock := brokertest.New[string](t, broker.WithVisibilityTimeout(vis))
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

func TestTTL(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithVisibilityTimeout(vis))
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMessageTTL(time.Minute))
	_, err := b.Publish(ctx, "t", "short", broker.WithTTL(5*time.Second))
	require.NoError(t, err)
	brokertest.Publish(t, b, "t", "default")

	mock.Add(5*time.Second - time.Nanosecond)
	assert.Equal(t, 2, s.Stats().Visible)
	mock.Add(time.Nanosecond) // now == PublishedAt + TTL
	dls := b.DeadLetters()
	require.Len(t, dls, 1, "expired while waiting")
	assert.Equal(t, "short", dls[0].Message.Payload)
	assert.Equal(t, queue.ReasonExpired, dls[0].Reason)
	assert.Equal(t, 0, dls[0].Attempts)

	d, err := s.PollWithVisibility(ctx, 1, 2*time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"default"}, payloads(d))
	mock.Add(time.Minute) // past the TTL, but in flight: may still be acked
	require.NoError(t, s.Ack(d[0].LeaseID))
	balanced(t, s.Stats())

	brokertest.Publish(t, b, "t", "comes back")
	mock.Add(time.Minute - vis)
	d = s.TryPoll(1)
	require.Len(t, d, 1)
	mock.Add(vis) // lease expires after the TTL: dead-lettered, not redelivered
	assert.Empty(t, s.TryPoll(1))
	dls = b.DeadLetters()
	require.Len(t, dls, 2)
	assert.Equal(t, queue.ReasonExpired, dls[1].Reason)
	assert.Equal(t, 1, dls[1].Attempts)

	// Redrive counts the TTL again from the redrive.
	n, err := b.Redrive(func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload == "comes back" })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	mock.Add(time.Minute - time.Nanosecond)
	assert.Equal(t, 1, s.Stats().Visible)
	mock.Add(time.Nanosecond)
	assert.Equal(t, 0, s.Stats().Visible)
	balanced(t, s.Stats())

	_, err = b.Publish(ctx, "t", "x", broker.WithTTL(0))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}

func TestWildcardSubscriptions(t *testing.T) {
	b, _ := brokertest.New[string](t)
	require.NoError(t, b.CreateTopic("orders.eu.created"))
	one, err := b.Subscribe("orders.*.created", "one-segment")
	require.NoError(t, err)
	rest, err := b.Subscribe("orders.>", "rest")
	require.NoError(t, err)
	hash, err := b.Subscribe("#", "everything")
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("orders.us.created")) // created after the subscriptions
	require.NoError(t, b.CreateTopic("orders.us.paid"))
	require.NoError(t, b.CreateTopic("orders"))

	for _, topic := range []string{"orders.eu.created", "orders.us.created", "orders.us.paid", "orders"} {
		brokertest.Publish(t, b, topic, topic)
	}
	assert.Equal(t, []string{"orders.eu.created", "orders.us.created"}, payloads(one.TryPoll(10)))
	assert.Equal(t, []string{"orders.eu.created", "orders.us.created", "orders.us.paid"}, payloads(rest.TryPoll(10)), "'>' needs at least one segment")
	got := hash.TryPoll(10)
	assert.Len(t, got, 4)
	assert.Equal(t, "orders.us.paid", got[2].Topic, "a delivery names its real topic")

	same, err := b.Subscription("orders.>", "rest")
	require.NoError(t, err)
	assert.Same(t, rest, same)
	require.NoError(t, b.DeleteTopic("orders.eu.created"))
	_, err = rest.Poll(canceled(), 1)
	assert.ErrorIs(t, err, errCanceled, "a pattern subscription outlives a deleted topic")
	require.NoError(t, b.Unsubscribe("orders.>", "rest"))
	brokertest.Publish(t, b, "orders.us.paid", "after")
	_, err = rest.Poll(ctx, 1)
	assert.ErrorIs(t, err, queue.ErrClosed)
	assert.Len(t, hash.TryPoll(10), 1)

	for _, p := range []string{"a.>.b", "a.b*", "*.", ">x"} {
		_, err := b.Subscribe(p, "bad")
		assert.ErrorIs(t, err, queue.ErrInvalidArgument, p)
	}
}

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
	assert.Equal(t, "max-attempts", dl.Headers.Get(vocab.HeaderReason))
	assert.Equal(t, "1", dl.Headers.Get(vocab.HeaderAttempts))
	assert.Equal(t, "bad input", dl.Headers.Get(vocab.HeaderLastError))
	assert.Equal(t, "worker", dl.Headers.Get(vocab.HeaderSubscription))
	assert.Equal(t, "jobs", dl.Headers.Get(vocab.HeaderTopic))
	assert.Equal(t, d.ID.String(), dl.Headers.Get(vocab.HeaderMessageID))

	back, ok := broker.DeadLetterOf(dl.Message)
	require.True(t, ok, "a message from a dead-letter topic reads back as its dead letter")
	assert.Equal(t, queue.DeadLetter[string]{
		Subscription: "worker",
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

func TestPublishDedup(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithDedupWindow(time.Minute))
	s := brokertest.Subscribe(t, b, "t", "s")
	first, err := b.Publish(ctx, "t", "charge #1", broker.WithDedupID("order-1"))
	require.NoError(t, err)
	mock.Add(time.Minute - time.Nanosecond)
	again, err := b.Publish(ctx, "t", "charge #1 (retry)", broker.WithDedupID("order-1"))
	require.NoError(t, err)
	assert.Equal(t, first, again, "a duplicate returns the original message")
	assert.Equal(t, uint64(1), s.Stats().Published)

	mock.Add(time.Nanosecond) // the window is fixed from the first publish
	later, err := b.Publish(ctx, "t", "charge #1 (much later)", broker.WithDedupID("order-1"))
	require.NoError(t, err)
	assert.NotEqual(t, first.ID, later.ID)
	assert.Equal(t, uint64(2), s.Stats().Published)

	require.NoError(t, b.CreateTopic("other"))
	brokertest.Subscribe(t, b, "other", "s")
	_, err = b.Publish(ctx, "other", "x", broker.WithDedupID("order-1"))
	require.NoError(t, err)
	_, err = b.Publish(ctx, "t", "x", broker.WithDedupID(""))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}

func TestPublishDedupFailedPublishRecordsNothing(t *testing.T) {
	b, _ := brokertest.New[int](t, broker.WithDedupLimit(2))
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject))
	brokertest.Publish(t, b, "t", 0)
	_, err := b.Publish(ctx, "t", 1, broker.WithDedupID("x"))
	require.ErrorIs(t, err, queue.ErrQueueFull)
	d := s.TryPoll(1)
	require.NoError(t, s.Ack(d[0].LeaseID))
	m, err := b.Publish(ctx, "t", 1, broker.WithDedupID("x"))
	require.NoError(t, err, "the retry is not taken for a duplicate")
	assert.Equal(t, []int{1}, payloads(s.TryPoll(1)))
	_ = m

	// The limit bounds memory: the oldest ids are forgotten early.
	for _, id := range []string{"y", "z", "x"} {
		_, err := b.Publish(ctx, "t", 9, broker.WithDedupID(id))
		if err != nil {
			require.ErrorIs(t, err, queue.ErrQueueFull)
		}
	}
}

func TestPollWithVisibilityAndPurge(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithVisibilityTimeout(vis))
	s := brokertest.Subscribe(t, b, "t", "s")
	brokertest.Publish(t, b, "t", "a", "b", "c")
	d, err := s.PollWithVisibility(ctx, 1, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, brokertest.Epoch.Add(time.Hour), d[0].Deadline)
	mock.Add(vis)
	assert.Equal(t, 1, s.Stats().InFlight, "this poll's lease outlives the subscription's timeout")
	_, err = s.PollWithVisibility(ctx, 1, 0)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)

	n, err := s.Purge()
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	st := s.Stats()
	assert.Equal(t, uint64(3), st.Dropped)
	balanced(t, st)
	assert.ErrorIs(t, s.Ack(d[0].LeaseID), queue.ErrLeaseNotFound, "purged")
	brokertest.Publish(t, b, "t", "after")
	assert.Equal(t, []string{"after"}, payloads(s.TryPoll(10)))
}

// TestPollerKeepsPerKeyOrder runs 8 workers over 100 keys with random
// failures: each key's messages are acked in publish order.
func TestPollerKeepsPerKeyOrder(t *testing.T) {
	const keys, perKey = 100, 20
	b, err := broker.New[int](broker.WithMaxAttempts(queue.UnlimitedAttempts),
		broker.WithRetry(queue.RetryPolicy{Initial: time.Millisecond, Max: 5 * time.Millisecond}))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	s, err := b.Subscribe("t", "s")
	require.NoError(t, err)
	for i := range perKey {
		for k := range keys {
			_, err := b.Publish(ctx, "t", i, broker.WithKey(fmt.Sprint(k)))
			require.NoError(t, err)
		}
	}

	var mu sync.Mutex
	acked := make(map[string][]int)
	var failures atomic.Int64
	rng := rand.New(rand.NewPCG(5, 6))
	var rngMu sync.Mutex
	handler := func(_ context.Context, d queue.Delivery[int]) error {
		rngMu.Lock()
		fail := rng.IntN(4) == 0
		rngMu.Unlock()
		if fail {
			failures.Add(1)
			return errors.New("random failure")
		}
		mu.Lock()
		acked[d.Key] = append(acked[d.Key], d.Payload)
		mu.Unlock()
		return nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := poller.New(s, handler, poller.WithWorkers(8), poller.WithBatch(8),
		poller.WithObserver(func(poller.Event[int]) {
			if st := s.Stats(); st.Acked == keys*perKey {
				cancel()
			}
		}))
	require.NoError(t, err)
	require.NoError(t, p.Run(runCtx))

	require.Greater(t, failures.Load(), int64(0))
	require.Len(t, acked, keys)
	for k, got := range acked {
		want := make([]int, perKey)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, got, "key %s", k)
	}
}

// TestPublishDedupRemembersLimitIDs: with a limit of n, the n latest IDs are
// all remembered (the check for a duplicate comes before the eviction that
// makes room for a new ID), so publishing n IDs twice queues n messages.
func TestPublishDedupRemembersLimitIDs(t *testing.T) {
	b, _ := brokertest.New[string](t, broker.WithDedupLimit(3))
	s := brokertest.Subscribe(t, b, "t", "s")
	for range 2 {
		for _, id := range []string{"0", "1", "2"} {
			_, err := b.Publish(ctx, "t", id, broker.WithDedupID(id))
			require.NoError(t, err)
		}
	}
	require.Equal(t, 3, s.Stats().Visible)

	b10, _ := brokertest.New[int](t, broker.WithDedupLimit(10))
	s10 := brokertest.Subscribe(t, b10, "t", "s")
	for range 2 {
		for i := range 10 {
			_, err := b10.Publish(ctx, "t", i, broker.WithDedupID(fmt.Sprint(i)))
			require.NoError(t, err)
		}
	}
	require.Equal(t, 10, s10.Stats().Visible)
}

// TestPublishDedupConcurrentSameID: publishes of one ID that race each other
// queue the message once, and every one of them returns that message.
func TestPublishDedupConcurrentSameID(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	const n = 8
	ids := make([]uuid.UUID, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m, err := b.Publish(ctx, "t", i, broker.WithDedupID("same"))
			assert.NoError(t, err)
			ids[i] = m.ID
		})
	}
	wg.Wait()
	require.Equal(t, 1, s.Stats().Visible)
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
}

// TestPublishDedupFullRefusesNewIDs: at the limit, with every ID inside its
// window, a new ID is refused (ErrDedupFull) and nothing is published; a
// duplicate of a remembered ID is still recognised; once the window has
// passed, new IDs go in again.
func TestPublishDedupFullRefusesNewIDs(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithDedupLimit(2), broker.WithDedupWindow(time.Minute))
	s := brokertest.Subscribe(t, b, "t", "s")
	for _, id := range []string{"a", "b"} {
		_, err := b.Publish(ctx, "t", id, broker.WithDedupID(id))
		require.NoError(t, err)
	}
	_, err := b.Publish(ctx, "t", "c", broker.WithDedupID("c"))
	require.ErrorIs(t, err, broker.ErrDedupFull)
	require.Equal(t, 2, s.Stats().Visible, "the refused publish queued nothing")
	m, err := b.Publish(ctx, "t", "a again", broker.WithDedupID("a"))
	require.NoError(t, err)
	require.Equal(t, "a", m.Payload, "a duplicate is still recognised")
	_, err = b.Publish(ctx, "t", "no id")
	require.NoError(t, err, "a publish without an ID is not limited")

	mock.Add(time.Minute)
	_, err = b.Publish(ctx, "t", "c", broker.WithDedupID("c"))
	require.NoError(t, err)
	require.Equal(t, 4, s.Stats().Visible)
}

// TestFullSubscriptionRefusalIsTyped: a full subscription's refusal says
// which subscription and its limit (errors.As), and still matches
// queue.ErrQueueFull (errors.Is), for every way to meet it.
func TestFullSubscriptionRefusalIsTyped(t *testing.T) {
	b, _ := brokertest.New[string](t)
	rej := brokertest.Subscribe(t, b, "t", "reject", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject))
	brokertest.Subscribe(t, b, "t", "block", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowBlock))
	brokertest.Publish(t, b, "t", "first")

	_, err := b.Publish(canceled(), "t", "second")
	require.ErrorIs(t, err, queue.ErrQueueFull)
	require.ErrorIs(t, err, context.Canceled, "the blocked publisher's reason")
	var names []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *queue.FullError
		require.ErrorAs(t, e, &fe)
		require.Equal(t, 1, fe.Limit)
		names = append(names, fe.Subscription)
	}
	require.ElementsMatch(t, []string{"reject", "block"}, names)

	// A redrive into a full subscription.
	d := rej.TryPoll(1)
	require.NoError(t, rej.Reject(d[0].LeaseID, errors.New("no")))
	_, err = b.Publish(canceled(), "t", "refill")
	require.ErrorIs(t, err, queue.ErrQueueFull) // "block" is still full; "reject" took it
	_, err = b.Redrive(func(queue.DeadLetter[string]) bool { return true })
	var fe *queue.FullError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "reject", fe.Subscription)
}
