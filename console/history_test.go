package console_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/queue"
)

// eventually waits until cond holds, yielding between checks; the
// deadline is a hang guard, never a timing assertion.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached: %s", what)
		}
		runtime.Gosched()
	}
}

// waitHistory waits until Record has taken the sample of the clock's
// step (AwaitRecorded), and returns the history of orders/billing, whose
// last point must be at.
func waitHistory[T any](t *testing.T, c *console.Console[T], url string, at time.Time) console.HistorySeries {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang guard
	defer cancel()
	require.NoError(t, c.AwaitRecorded(ctx))
	var v console.HistoryView
	require.Equal(t, http.StatusOK, getJSON(t, url+"/api/history?topic=orders&name=billing", &v))
	require.Len(t, v.Series, 1)
	require.NotEmpty(t, v.Series[0].Points)
	require.Equal(t, at, v.Series[0].Points[len(v.Series[0].Points)-1].At, "the last point")
	return v.Series[0]
}

func TestRecordKeepsAFixedHistory(t *testing.T) {
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "orders", "billing")
	c, err := console.New(b, console.WithHistory(time.Minute, 4))
	require.NoError(t, err)
	url := newServer(t, c)

	_, page := get(t, url+"/")
	assert.Contains(t, page, "No history is kept")
	ended, end := context.WithCancel(context.Background())
	end()
	assert.ErrorIs(t, c.AwaitRecorded(ended), context.Canceled, "no Record runs: it waits for ctx")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Record(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	first := waitHistory(t, c, url, brokertest.Epoch)
	require.Len(t, first.Points, 1)
	assert.Equal(t, console.HistoryPoint{At: brokertest.Epoch}, first.Points[0], "the first point counts nothing")
	assert.ErrorIs(t, c.Record(ctx), console.ErrRecording, "a second Record")
	//lint:ignore SA1012 a nil context is the invalid input under test
	assert.ErrorIs(t, c.Record(nil), queue.ErrInvalidArgument)

	// Each minute: what was published, acked, retried, dead-lettered, and the depth.
	for minute := 1; minute <= 5; minute++ {
		brokertest.Publish(t, b, "orders", strings.Repeat("x", minute))
		brokertest.Publish(t, b, "orders", "y")
		ds := sub.TryPoll(1)
		require.Len(t, ds, 1)
		require.NoError(t, sub.Ack(ds[0].LeaseID))
		mock.Add(time.Minute)
		hs := waitHistory(t, c, url, brokertest.Epoch.Add(time.Duration(minute)*time.Minute))
		assert.Len(t, hs.Points, min(minute+1, 4))
	}
	hs := waitHistory(t, c, url, brokertest.Epoch.Add(5*time.Minute))
	assert.Equal(t, brokertest.Epoch.Add(2*time.Minute), hs.Points[0].At, "the oldest points go")
	last := hs.Points[3]
	assert.Equal(t, brokertest.Epoch.Add(5*time.Minute), last.At)
	assert.Equal(t, uint64(2), last.Published)
	assert.Equal(t, uint64(1), last.Acked)
	assert.Equal(t, int64(5), last.Depth)

	_, page = get(t, url+"/")
	assert.Contains(t, page, `<svg class="chart"`)
	assert.Contains(t, page, `<polyline class="published"`)
	assert.Equal(t, 1, strings.Count(page, `<polyline class="depth"`), "one subscription, one depth line")
	_, page = get(t, url+"/subscription?topic=orders&name=billing")
	assert.Contains(t, page, `id="history"`)

	// A subscription that goes loses its history.
	require.NoError(t, b.Unsubscribe("orders", "billing"))
	mock.Add(time.Minute)
	require.NoError(t, c.AwaitRecorded(ctx))
	var gone console.HistoryView
	getJSON(t, url+"/api/history", &gone)
	assert.Empty(t, gone.Series, "the history of a subscription that is gone goes")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	done <- nil
	var v console.HistoryView
	getJSON(t, url+"/api/history", &v)
	assert.False(t, v.Recording)
}

func TestWithHistoryRefusesBadArguments(t *testing.T) {
	b, _ := brokertest.New[string](t)
	for _, o := range []console.Option{console.WithHistory(time.Millisecond, 10), console.WithHistory(time.Minute, 1), console.WithHistory(time.Minute, 1_000_000)} {
		_, err := console.New(b, o)
		assert.ErrorIs(t, err, queue.ErrInvalidArgument)
	}
}

func TestDeadLetterShowsEachAttempt(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithMaxAttempts(3), broker.WithRetry(queue.RetryPolicy{NoBackoff: true})))
	sub := brokertest.Subscribe(t, b, "orders", "billing")
	m := brokertest.Publish(t, b, "orders", "doomed")[0]
	for i, cause := range []string{"card declined", "gateway timeout", "card <b>declined</b> again"} {
		ds := sub.TryPoll(1)
		require.Len(t, ds, 1)
		mock.Add(time.Duration(i+1) * time.Second)
		require.NoError(t, sub.Fail(ds[0].LeaseID, errors.New(cause)))
	}
	url := newServer(t, mustConsole(t, b))
	var v console.DeadLetterView
	require.Equal(t, http.StatusOK, getJSON(t, url+"/api/dead-letter?ref="+m.ID.String()+"/billing", &v))
	require.Len(t, v.History, 3)
	assert.Equal(t, console.AttemptView{Attempt: 2, Outcome: "failed", At: brokertest.Epoch.Add(3 * time.Second), HeldSeconds: 2, Error: "gateway timeout"}, v.History[1])
	_, page := get(t, url+"/dead-letter?ref="+m.ID.String()+"/billing")
	assert.Contains(t, page, `id="attempts"`)
	assert.Equal(t, 3, strings.Count(page, `<span class="outcome failed">`))
	assert.Contains(t, page, "card &lt;b&gt;declined&lt;/b&gt; again", "an error is text")
}

func mustConsole(t *testing.T, b *broker.Broker[string], opts ...console.Option) *console.Console[string] {
	t.Helper()
	c, err := console.New(b, opts...)
	require.NoError(t, err)
	return c
}

// A subscription made again between two samples starts its counters from
// zero: the step's counts are what the new one counted, never a
// difference that went below zero.
func TestHistorySurvivesACounterReset(t *testing.T) {
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "orders", "billing")
	c, err := console.New(b, console.WithHistory(time.Minute, 10))
	require.NoError(t, err)
	url := newServer(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Record(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitHistory(t, c, url, brokertest.Epoch)
	brokertest.Publish(t, b, "orders", "a", "b", "c", "d")
	ds := sub.TryPoll(4)
	require.Len(t, ds, 4)
	for _, d := range ds {
		require.NoError(t, sub.Ack(d.LeaseID))
	}
	mock.Add(time.Minute)
	waitHistory(t, c, url, brokertest.Epoch.Add(time.Minute))
	require.NoError(t, b.Unsubscribe("orders", "billing"))
	brokertest.Subscribe(t, b, "orders", "billing")
	brokertest.Publish(t, b, "orders", "e")
	mock.Add(time.Minute)
	hs := waitHistory(t, c, url, brokertest.Epoch.Add(2*time.Minute))
	last := hs.Points[len(hs.Points)-1]
	assert.Equal(t, console.HistoryPoint{At: brokertest.Epoch.Add(2 * time.Minute), Published: 1, Depth: 1}, last,
		"the step after the subscription was made again counts what the new one counted")
}
