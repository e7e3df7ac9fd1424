package broker_test

// Peek, Pause and Resume, and AllSubscriptions: what a console reads and
// does.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

func TestPeekShowsEveryStateAndChangesNothing(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s")
	brokertest.Publish(t, b, "t", "leased", "failed")
	_, err := b.Publish(ctx, "t", "later", broker.WithDelay(time.Minute))
	require.NoError(t, err)
	_, err = b.Publish(ctx, "t", "k1", broker.WithKey("k"))
	require.NoError(t, err)
	_, err = b.Publish(ctx, "t", "k2", broker.WithKey("k"))
	require.NoError(t, err)
	brokertest.Publish(t, b, "t", "visible")

	ds := s.TryPoll(3) // leased, failed, k1
	require.Len(t, ds, 3)
	require.NoError(t, s.Fail(ds[1].LeaseID, errors.New("card declined")))
	before := s.Stats()

	all, err := s.Peek(queue.PeekQuery{Limit: 10})
	require.NoError(t, err)
	type row struct {
		Payload   string
		State     queue.State
		Attempts  int
		At        time.Time
		LastError string
	}
	var got []row
	for i, h := range all {
		got = append(got, row{h.Payload, h.State, h.Attempts, h.At, h.LastError})
		if i > 0 {
			assert.Greater(t, h.Seq, all[i-1].Seq, "Seq order")
		}
	}
	retryAt := brokertest.Epoch.Add(queue.RetryPolicy{}.Delay(1))
	assert.Equal(t, []row{
		{"leased", queue.StateInFlight, 1, brokertest.Epoch.Add(vis), ""},
		{"failed", queue.StateDelayed, 1, retryAt, "card declined"},
		{"later", queue.StateDelayed, 0, brokertest.Epoch.Add(time.Minute), ""},
		{"k1", queue.StateInFlight, 1, brokertest.Epoch.Add(vis), ""},
		{"k2", queue.StateHeldBack, 0, time.Time{}, ""},
		{"visible", queue.StateVisible, 0, time.Time{}, ""},
	}, got)
	assert.Equal(t, "k", all[4].Key)
	assert.Equal(t, before, s.Stats(), "peeking changes no count")

	delayed, err := s.Peek(queue.PeekQuery{State: queue.StateDelayed, Limit: 10})
	require.NoError(t, err)
	assert.Len(t, delayed, 2)

	mock.Add(vis) // the leases expire: Peek settles first
	again, err := s.Peek(queue.PeekQuery{State: queue.StateInFlight, Limit: 10})
	require.NoError(t, err)
	assert.Empty(t, again)
}

func TestPeekPagesThroughMoreThanAChunk(t *testing.T) {
	b, _ := brokertest.New[int](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxQueue(50_000))
	const n = 40_000 // more slots than one chunk of the scan
	ps := make([]int, n)
	for i := range ps {
		ps[i] = i
	}
	_, err := b.PublishBatch(ctx, "t", ps)
	require.NoError(t, err)
	var seen []int
	after := uint64(0)
	for {
		page, err := s.Peek(queue.PeekQuery{After: after, Limit: queue.MaxPeek})
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		for _, h := range page {
			seen = append(seen, h.Payload)
		}
		after = page[len(page)-1].Seq
	}
	assert.Equal(t, ps, seen, "every message once, in order")
}

func TestPeekRefusesBadQueries(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	for _, q := range []queue.PeekQuery{{}, {Limit: -1}, {Limit: queue.MaxPeek + 1}, {Limit: 1, State: 9}} {
		_, err := s.Peek(q)
		assert.ErrorIs(t, err, queue.ErrInvalidArgument, "%+v", q)
	}
	require.NoError(t, b.Unsubscribe("t", "s"))
	_, err := s.Peek(queue.PeekQuery{Limit: 1})
	assert.ErrorIs(t, err, queue.ErrClosed)
	assert.ErrorIs(t, s.Pause(), queue.ErrClosed)
	assert.ErrorIs(t, s.Resume(), queue.ErrClosed)
}

func TestStateWords(t *testing.T) {
	for _, st := range []queue.State{0, queue.StateVisible, queue.StateDelayed, queue.StateInFlight, queue.StateHeldBack} {
		back, ok := queue.ParseState(st.String())
		assert.True(t, ok, st.String())
		assert.Equal(t, st, back)
	}
	_, ok := queue.ParseState("asleep")
	assert.False(t, ok)
	assert.Equal(t, "State(9)", queue.State(9).String())
}

func TestPauseHoldsDeliveriesAndResumeWakesAPoll(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	s := brokertest.Subscribe(t, b, "t", "s")
	brokertest.Publish(t, b, "t", "a", "b")
	d := s.TryPoll(1)
	require.Len(t, d, 1)
	require.NoError(t, s.Pause())
	require.NoError(t, s.Pause(), "twice")
	brokertest.Publish(t, b, "t", "c") // still accepted
	assert.Empty(t, s.TryPoll(10))
	st := s.Stats()
	assert.True(t, st.Paused)
	assert.Equal(t, 2, st.Visible)
	assert.Contains(t, st.String(), " paused")
	require.NoError(t, s.Extend(d[0].LeaseID, vis), "leases in flight still settle")

	got := make(chan []string, 1)
	go func() {
		ds, err := s.Poll(context.Background(), 10)
		if err != nil {
			got <- []string{err.Error()}
			return
		}
		got <- payloads(ds)
	}()
	brokertest.AwaitParked(t, s, 1)
	mock.Add(2 * vis) // the lease expires while paused: nothing is delivered
	brokertest.AwaitParked(t, s, 1)
	assert.Equal(t, 3, s.Stats().Visible)
	require.NoError(t, s.Resume())
	assert.Equal(t, []string{"a", "b", "c"}, <-got)
	assert.False(t, s.Stats().Paused)
	require.NoError(t, s.Resume(), "resuming a running subscription")
}

func TestAllSubscriptionsListsPatternsToo(t *testing.T) {
	b, _ := brokertest.New[string](t)
	require.NoError(t, b.CreateTopic("orders"))
	require.NoError(t, b.CreateTopic("audit"))
	brokertest.Subscribe(t, b, "orders", "shipping")
	brokertest.Subscribe(t, b, "orders", "billing")
	_, err := b.Subscribe("orders.>", "all")
	require.NoError(t, err)
	brokertest.Subscribe(t, b, "audit", "log")
	var names []string
	for _, s := range b.AllSubscriptions() {
		names = append(names, fmt.Sprintf("%s/%s", s.Topic(), s.Name()))
	}
	assert.Equal(t, []string{"audit/log", "orders/billing", "orders/shipping", "orders.>/all"}, names)
	require.NoError(t, b.Close())
	assert.Empty(t, b.AllSubscriptions())
}

func TestPeekByIDAndKey(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	msgs := brokertest.Publish(t, b, "t", "a", "b")
	k1, err := b.Publish(ctx, "t", "k1", broker.WithKey("k"))
	require.NoError(t, err)
	k2, err := b.Publish(ctx, "t", "k2", broker.WithKey("k")) // held back behind k1
	require.NoError(t, err)

	hs, err := s.Peek(queue.PeekQuery{ID: msgs[1].ID, Limit: 5})
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, "b", hs[0].Payload)

	hs, err = s.Peek(queue.PeekQuery{Key: "k", Limit: 5})
	require.NoError(t, err)
	require.Len(t, hs, 2)
	assert.Equal(t, []any{k1.ID, queue.StateVisible, k2.ID, queue.StateHeldBack}, []any{hs[0].ID, hs[0].State, hs[1].ID, hs[1].State})

	hs, err = s.Peek(queue.PeekQuery{Key: "k", State: queue.StateVisible, Limit: 5})
	require.NoError(t, err)
	require.Len(t, hs, 1, "the filters add up")
	hs, err = s.Peek(queue.PeekQuery{ID: msgs[0].ID, Key: "k", Limit: 5})
	require.NoError(t, err)
	assert.Empty(t, hs, "a message without the key")
}

func TestLookupDedupIDInsideItsWindow(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithDedupWindow(time.Minute))
	brokertest.Subscribe(t, b, "a", "s")
	brokertest.Subscribe(t, b, "b", "s")
	ma, err := b.Publish(ctx, "a", "x", broker.WithDedupID("order-1"))
	require.NoError(t, err)
	mock.Add(30 * time.Second)
	mb, err := b.Publish(ctx, "b", "y", broker.WithDedupID("order-1"))
	require.NoError(t, err)

	got := b.LookupDedupID("order-1")
	require.Len(t, got, 2)
	assert.Equal(t, broker.DedupRecord{Topic: "a", DedupID: "order-1", MessageID: ma.ID, FirstPublished: brokertest.Epoch}, got[0])
	assert.Equal(t, mb.ID, got[1].MessageID)
	assert.Empty(t, b.LookupDedupID("order-2"))
	assert.Empty(t, b.LookupDedupID(""))

	mock.Add(30 * time.Second) // a's window has passed, b's not
	got = b.LookupDedupID("order-1")
	require.Len(t, got, 1)
	assert.Equal(t, "b", got[0].Topic)
}
