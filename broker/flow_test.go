package broker_test

// Flow control on a subscription: rate limits, per-key rate limits and
// per-key concurrency, decided where a Poll picks, on the mock clock.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

// pollAsync starts a Poll of up to n and returns where its result arrives.
func pollAsync(s *broker.Subscription[string], n int) <-chan []queue.Delivery[string] {
	got := make(chan []queue.Delivery[string], 1)
	go func() {
		ds, _ := s.Poll(context.Background(), n)
		got <- ds
	}()
	return got
}

func TestRateLimitSchedule(t *testing.T) {
	b, mock := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithRateLimit(10, time.Second))
	for i := range 100 {
		brokertest.Publish(t, b, "t", fmt.Sprint(i))
	}

	first := s.TryPoll(100)
	require.Len(t, first, 10, "a full bucket: 10 at once")
	assert.Equal(t, "0", first[0].Payload)
	st := s.Stats()
	assert.Equal(t, 90, st.Visible)
	assert.Equal(t, 90, st.Limited, "every visible message waits for a token")
	assert.Equal(t, 10, st.InFlight, "a message waiting for a token holds no lease")
	assert.Empty(t, s.TryPoll(100), "no token left")

	mock.Add(99 * time.Millisecond)
	assert.Empty(t, s.TryPoll(100), "the first token is due at 100ms")
	mock.Add(time.Millisecond)
	next := s.TryPoll(100)
	require.Len(t, next, 1, "one token every 100ms")
	assert.Equal(t, "10", next[0].Payload, "publish order")
	assert.Equal(t, 1, next[0].Attempt, "no attempt spent while waiting")

	// A Poll with visible messages and no token parks, and wakes on the Add
	// that reaches the next token (200ms).
	got := pollAsync(s, 100)
	brokertest.AwaitParked(t, s, 1)
	mock.Add(99 * time.Millisecond)
	assert.Empty(t, s.TryPoll(1), "no token short of 200ms")
	mock.Add(time.Millisecond)
	select {
	case ds := <-got:
		assert.Equal(t, []string{"11"}, payloads(ds))
	case <-time.After(10 * time.Second):
		t.Fatal("the Poll did not wake at the token's instant")
	}

	// A second's worth refills the bucket, never more than its capacity.
	mock.Add(10 * time.Second)
	assert.Len(t, s.TryPoll(100), 10)
	st = s.Stats()
	assert.Equal(t, uint64(22), st.Delivered)
	assert.Equal(t, 78, st.Limited)
	balanced(t, st)
}

// Redeliveries take tokens too: an expired lease's message waits for one.
func TestRateLimitCountsRedeliveries(t *testing.T) {
	b, mock := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithRateLimit(1, time.Minute), broker.WithVisibilityTimeout(10*time.Second))
	brokertest.Publish(t, b, "t", "a")
	require.Len(t, s.TryPoll(1), 1)
	mock.Add(10 * time.Second) // the lease expires: visible again, no token for a minute
	assert.Empty(t, s.TryPoll(1))
	assert.Equal(t, 1, s.Stats().Limited)
	mock.Add(50 * time.Second)
	ds := s.TryPoll(1)
	require.Len(t, ds, 1)
	assert.Equal(t, 2, ds[0].Attempt)
}

func TestKeyRateLimitSkipsAnEmptyKey(t *testing.T) {
	b, mock := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithKeyRateLimit(1, time.Second), broker.WithKeyConcurrency(3))
	publishKeyed(t, b, "t", "a", "a1", "a2", "a3")
	publishKeyed(t, b, "t", "b", "b1")
	brokertest.Publish(t, b, "t", "free")

	assert.Equal(t, []string{"a1", "b1", "free"}, payloads(s.TryPoll(10)), "a's bucket is empty after a1: the others flow")
	st := s.Stats()
	assert.Equal(t, 2, st.Visible, "a2 and a3 are visible, waiting for a's tokens")
	assert.Equal(t, 2, st.Limited)
	assert.Equal(t, 0, st.Delayed)
	balanced(t, st)
	held, err := s.Peek(queue.PeekQuery{State: queue.StateVisible, Limit: 10})
	require.NoError(t, err)
	assert.Len(t, held, 2, "Peek shows them visible")

	publishKeyed(t, b, "t", "c", "c1")
	assert.Equal(t, []string{"c1"}, payloads(s.TryPoll(10)), "a new key is served while a waits")

	mock.Add(time.Second)
	assert.Equal(t, []string{"a2"}, payloads(s.TryPoll(10)), "one token a second for a")
	mock.Add(time.Second)
	ds := s.TryPoll(10)
	assert.Equal(t, []string{"a3"}, payloads(ds))
	assert.Equal(t, 1, ds[0].Attempt)
	assert.Equal(t, 0, s.Stats().Limited)
}

// A Poll that finds only messages whose keys have no token parks instead
// of returning nothing, and wakes when the first key's token is due.
func TestKeyRateLimitParksThePoll(t *testing.T) {
	b, mock := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithKeyRateLimit(2, time.Second))
	publishKeyed(t, b, "t", "a", "a1", "a2", "a3")
	for _, want := range []string{"a1", "a2"} {
		ds := s.TryPoll(1)
		require.Len(t, ds, 1)
		assert.Equal(t, want, ds[0].Payload)
		require.NoError(t, s.Ack(ds[0].LeaseID))
	}
	got := pollAsync(s, 5)
	brokertest.AwaitParked(t, s, 1)
	mock.Add(499 * time.Millisecond)
	assert.Empty(t, s.TryPoll(1), "a's next token is due at 500ms")
	mock.Add(time.Millisecond)
	select {
	case ds := <-got:
		assert.Equal(t, []string{"a3"}, payloads(ds))
	case <-time.After(10 * time.Second):
		t.Fatal("the Poll did not wake when a's token was due")
	}
}

func TestKeyConcurrency(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithKeyConcurrency(3))
	publishKeyed(t, b, "t", "k", "k1", "k2", "k3", "k4", "k5")
	publishKeyed(t, b, "t", "j", "j1")

	first := s.TryPoll(10)
	assert.Equal(t, []string{"k1", "k2", "k3", "j1"}, payloads(first), "exactly 3 of k, in publish order")
	assert.Equal(t, 2, s.Stats().HeldBack)
	require.NoError(t, s.Ack(first[1].LeaseID)) // k2 completes first
	assert.Equal(t, []string{"k4"}, payloads(s.TryPoll(10)))
	require.NoError(t, s.Fail(first[0].LeaseID, errors.New("x"))) // k1 waits out a retry: still out
	assert.Empty(t, s.TryPoll(10))
	require.NoError(t, s.Ack(first[2].LeaseID))
	assert.Equal(t, []string{"k5"}, payloads(s.TryPoll(10)))
	balanced(t, s.Stats())
}

func TestFlowControlOptionsRefuseBadInput(t *testing.T) {
	b, _ := brokertest.New[string](t)
	require.NoError(t, b.CreateTopic("t"))
	for name, opt := range map[string]broker.SubscribeOption{
		"rate n 0":          broker.WithRateLimit(0, time.Second),
		"rate n -1":         broker.WithRateLimit(-1, time.Second),
		"rate per 0":        broker.WithRateLimit(1, 0),
		"rate per -1s":      broker.WithRateLimit(1, -time.Second),
		"rate too fast":     broker.WithRateLimit(10, 5*time.Nanosecond),
		"key rate n 0":      broker.WithKeyRateLimit(0, time.Second),
		"key rate per 0":    broker.WithKeyRateLimit(1, 0),
		"key concurrency 0": broker.WithKeyConcurrency(0),
		"key concurrency -": broker.WithKeyConcurrency(-2),
	} {
		_, err := b.Subscribe("t", "s", opt)
		assert.ErrorIs(t, err, queue.ErrInvalidArgument, name)
	}
	subs, err := b.Subscriptions("t")
	require.NoError(t, err)
	assert.Empty(t, subs, "a refused Subscribe creates nothing")
}

func TestDurableFlowControlIsStored(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("t"))
	_, err = b.Subscribe("t", "s", broker.WithRateLimit(5, time.Second), broker.WithKeyRateLimit(2, time.Minute), broker.WithKeyConcurrency(4))
	require.NoError(t, err)
	require.NoError(t, b.Close())

	b, err = broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	defer b.Close()
	s, err := b.Subscription("t", "s")
	require.NoError(t, err)
	cfg := s.Config()
	assert.Equal(t, queue.Rate{N: 5, Per: time.Second}, cfg.RateLimit)
	assert.Equal(t, queue.Rate{N: 2, Per: time.Minute}, cfg.KeyRateLimit)
	assert.Equal(t, 4, cfg.KeyConcurrency)

	_, err = b.Subscribe("t", "s", broker.WithRateLimit(6, time.Second), broker.WithKeyRateLimit(2, time.Minute), broker.WithKeyConcurrency(4))
	var mismatch *broker.ConfigMismatchError
	require.ErrorAs(t, err, &mismatch)
	require.Len(t, mismatch.Diffs, 1)
	assert.Equal(t, "WithRateLimit", mismatch.Diffs[0].Option)
	assert.Equal(t, "5/1s", mismatch.Diffs[0].Stored)
}

func TestFairKeys(t *testing.T) {
	b, _ := brokertest.New[string](t)
	fairSub := brokertest.Subscribe(t, b, "t", "fair", broker.WithFairKeys(), broker.WithKeyConcurrency(1000))
	plain := brokertest.Subscribe(t, b, "t", "plain", broker.WithKeyConcurrency(1000))
	for i := range 1000 {
		_, err := b.Publish(ctx, "t", fmt.Sprintf("a%d", i), broker.WithKey("a"))
		require.NoError(t, err)
	}
	publishKeyed(t, b, "t", "b", "b0")

	assert.Equal(t, []string{"a0", "b0"}, payloads(fairSub.TryPoll(2)), "b's message is among the first two")
	assert.Equal(t, []string{"a0", "a1"}, payloads(plain.TryPoll(2)), "oldest first without WithFairKeys")
	assert.Equal(t, []string{"a1", "a2"}, payloads(fairSub.TryPoll(2)), "a's backlog in order, alone now")
}

func TestFairKeysTakeTurns(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithFairKeys(), broker.WithKeyConcurrency(10))
	brokertest.Publish(t, b, "t", "u0", "u1", "u2") // no key: one key of their own
	publishKeyed(t, b, "t", "a", "a0", "a1", "a2")
	publishKeyed(t, b, "t", "b", "b0", "b1")
	_, err := b.Publish(ctx, "t", "a-urgent", broker.WithKey("a"), broker.WithPriority(queue.PriorityHigh))
	require.NoError(t, err)

	ds := s.TryPoll(10)
	assert.Equal(t, []string{"a-urgent", "u0", "a0", "b0", "u1", "a1", "b1", "u2", "a2"}, payloads(ds),
		"priority first, then the keys in turn, each in publish order")

	// A retried message takes its key's next turn.
	require.NoError(t, s.Nack(ds[1].LeaseID, 0)) // u0
	publishKeyed(t, b, "t", "b", "b2")
	assert.Equal(t, []string{"u0", "b2"}, payloads(s.TryPoll(10)))
	balanced(t, s.Stats())
}

// Turning WithFairKeys on (or off) for a durable subscription declared
// again reorders what is visible.
func TestDurableFairKeysToggle(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("t"))
	_, err = b.Subscribe("t", "s", broker.WithKeyConcurrency(5))
	require.NoError(t, err)
	publishKeyed(t, b, "t", "a", "a0", "a1", "a2")
	publishKeyed(t, b, "t", "b", "b0")
	require.NoError(t, b.Close())

	b, err = broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	defer b.Close()
	_, err = b.Subscribe("t", "s", broker.WithKeyConcurrency(5), broker.WithFairKeys())
	var mismatch *broker.ConfigMismatchError
	require.ErrorAs(t, err, &mismatch)
	assert.Equal(t, "WithFairKeys", mismatch.Diffs[0].Option)
	s, err := b.Subscribe("t", "s", broker.WithKeyConcurrency(5), broker.WithFairKeys(), broker.WithUpdate())
	require.NoError(t, err)
	assert.Equal(t, []string{"a0", "b0", "a1", "a2"}, payloads(s.TryPoll(10)))
}

// ReleaseAfter hands a lease back with its attempt, visible after the
// delay; on a durable broker the wait survives a reopen.
func TestReleaseAfter(t *testing.T) {
	b, mock := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	brokertest.Publish(t, b, "t", "a")
	d := s.TryPoll(1)[0]
	require.ErrorIs(t, s.ReleaseAfter(d.LeaseID, -time.Second), queue.ErrInvalidArgument)
	require.NoError(t, s.ReleaseAfter(d.LeaseID, 5*time.Second))
	require.ErrorIs(t, s.ReleaseAfter(d.LeaseID, time.Second), queue.ErrLeaseExpired, "twice: not current, the message still held")
	st := s.Stats()
	assert.Equal(t, 1, st.Delayed)
	mock.Add(5*time.Second - time.Nanosecond)
	assert.Empty(t, s.TryPoll(1))
	mock.Add(time.Nanosecond)
	again := s.TryPoll(1)
	require.Len(t, again, 1)
	assert.Equal(t, 1, again[0].Attempt, "no attempt spent")

	dir := t.TempDir()
	db, err := broker.Open(dir, queue.StringCodec(), broker.WithClock(mock))
	require.NoError(t, err)
	require.NoError(t, db.CreateTopic("t"))
	ds, err := db.Subscribe("t", "s")
	require.NoError(t, err)
	_, err = db.Publish(ctx, "t", "b")
	require.NoError(t, err)
	require.NoError(t, ds.ReleaseAfter(ds.TryPoll(1)[0].LeaseID, time.Minute))
	require.NoError(t, db.Close())
	db, err = broker.Open(dir, queue.StringCodec(), broker.WithClock(mock))
	require.NoError(t, err)
	defer db.Close()
	ds, err = db.Subscription("t", "s")
	require.NoError(t, err)
	assert.Equal(t, 1, ds.Stats().Delayed, "the wait is stored")
	mock.Add(time.Minute)
	got := ds.TryPoll(1)
	require.Len(t, got, 1)
	assert.Equal(t, 1, got[0].Attempt, "the attempt given back is stored")
}

// With WithFairKeys, over random publishes and polls: each key's messages
// come in publish order, and a message of a key with nothing else waiting
// is delivered after at most one message of each other key that had some
// waiting when it was published.
func TestFairKeysProperty(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		b, _ := brokertest.New[string](t)
		s := brokertest.Subscribe(t, b, "t", fmt.Sprint("s", seed), broker.WithFairKeys(), broker.WithKeyConcurrency(1000))
		keys := []string{"", "a", "b", "c", "d"}
		waiting := map[string][]string{} // by key: published, not yet delivered, in order
		type watch struct {
			key    string
			bound  int // other keys waiting at its publish
			others int // deliveries of other keys since
		}
		watched := map[string]*watch{}
		n := 0
		for range 2000 {
			if rng.IntN(3) > 0 {
				k := keys[rng.IntN(len(keys))]
				p := fmt.Sprint(n)
				n++
				if len(waiting[k]) == 0 {
					w := &watch{key: k}
					for _, o := range keys {
						if o != k && len(waiting[o]) > 0 {
							w.bound++
						}
					}
					watched[p] = w
				}
				waiting[k] = append(waiting[k], p)
				_, err := b.Publish(ctx, "t", p, broker.WithKey(k))
				require.NoError(t, err)
				continue
			}
			for _, d := range s.TryPoll(1 + rng.IntN(3)) {
				q := waiting[d.Key]
				require.NotEmpty(t, q, "seed %d: %q delivered for key %q, nothing waiting", seed, d.Payload, d.Key)
				require.Equal(t, q[0], d.Payload, "seed %d: key %q out of publish order", seed, d.Key)
				waiting[d.Key] = q[1:]
				require.NoError(t, s.Ack(d.LeaseID))
				for p, w := range watched {
					switch {
					case p == d.Payload:
						delete(watched, p)
					case w.key != d.Key:
						w.others++
						require.LessOrEqual(t, w.others, w.bound, "seed %d: %q (key %q) waited behind %d deliveries of other keys, %d had messages waiting", seed, p, w.key, w.others, w.bound)
					}
				}
			}
		}
	}
}
