package natsleasebus_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// consoleGet returns a GET's status and body.
func consoleGet(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// consolePost posts form to an api/actions URL and returns its status and
// result.
func consolePost(t *testing.T, u string, form url.Values) (int, console.Result) {
	t.Helper()
	resp, err := http.PostForm(u, form)
	require.NoError(t, err)
	defer resp.Body.Close()
	var res console.Result
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&res))
	return resp.StatusCode, res
}

func consoleJSON(t *testing.T, u string, v any) {
	t.Helper()
	status, body := consoleGet(t, u)
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), v))
}

// pollOne polls sub until it leases one message, within hangGuard.
func pollOne(t *testing.T, sub *natsleasebus.Subscription[string]) queue.Delivery[string] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	ds, err := sub.Poll(ctx, 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	return ds[0]
}

// A person on call, from the console alone over JetStream: sees the
// subscriptions and why a message died, fixes its payload and redrives
// it, discards another, purges, pauses and resumes.
func TestConsoleOverJetStream(t *testing.T) {
	ctx := context.Background()
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()))
	billing, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing", natsleasebus.WithMaxAttempts(1))
	require.NoError(t, err)
	t.Cleanup(func() { billing.Close() })
	shipping, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "shipping")
	require.NoError(t, err)
	t.Cleanup(func() { shipping.Close() })
	audit, err := natsleasebus.Subscribe[string](ctx, bus, "orders.>", "audit")
	require.NoError(t, err)
	require.NoError(t, audit.Close())

	_, err = natsleasebus.PublishBatch(ctx, bus, "orders", []string{`{"order":1,"card":"4242"}`, `{"order":2,"card":"0000"}`})
	require.NoError(t, err)
	ok := pollOne(t, billing)
	require.NoError(t, billing.Ack(ok.LeaseID))
	bad := pollOne(t, billing)
	require.NoError(t, billing.Fail(bad.LeaseID, errors.New("card declined")))

	be, err := natsleasebus.ConsoleBackend[string](bus)
	require.NoError(t, err)
	c, err := console.NewFor(be)
	require.NoError(t, err)
	web := httptest.NewServer(c)
	t.Cleanup(web.Close)

	// What is there.
	var o console.Overview
	consoleJSON(t, web.URL+"/api/overview", &o)
	rows := map[string]console.SubscriptionRow{}
	for _, r := range o.Subscriptions {
		rows[r.Topic+"/"+r.Name] = r
		assert.NotEmpty(t, r.Note)
	}
	require.Len(t, rows, 3, "%+v", o.Subscriptions)
	assert.Equal(t, 2, rows["orders/shipping"].Visible)
	assert.Equal(t, 0, rows["orders/billing"].Visible)
	assert.Equal(t, 1, rows["orders/billing"].DeadLettersHeld)
	assert.True(t, rows["orders.>/audit"].Pattern)
	assert.Equal(t, 1, o.DeadLetters.Held)

	status, page := consoleGet(t, web.URL+"/subscription?topic=orders&name=billing")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, `id="no-peek"`)
	assert.Contains(t, page, `id="pause"`)
	assert.Contains(t, page, `<th>WithMaxAttempts</th><td>1</td>`)
	status, _ = consoleGet(t, web.URL+"/subscription?topic=orders&name=nobody")
	assert.Equal(t, http.StatusNotFound, status)

	// Why it died; fix the card and redrive it.
	var l console.DeadLetterList
	consoleJSON(t, web.URL+"/api/dead-letters?reason=max-attempts&subscription=billing", &l)
	require.Len(t, l.Letters, 1)
	assert.Equal(t, "card declined", l.Letters[0].LastError)
	assert.Equal(t, bad.ID, l.Letters[0].ID)
	status, res := consolePost(t, web.URL+"/api/actions/redrive-edited", url.Values{
		"ref": {l.Letters[0].Ref}, "kind": {"json"}, "payload": {`{"order":2,"card":"4111"}`}})
	require.Equal(t, http.StatusOK, status, res.Error)
	assert.Equal(t, 1, res.Count)
	again := pollOne(t, billing)
	assert.Equal(t, `{"order":2,"card":"4111"}`, again.Payload)
	assert.Equal(t, bad.ID, again.ID, "the same message, fixed")
	require.NoError(t, billing.Ack(again.LeaseID))
	consoleJSON(t, web.URL+"/api/dead-letters", &l)
	assert.Empty(t, l.Letters)

	// Another dies; it is discarded.
	_, err = natsleasebus.Publish(ctx, bus, "orders", `{"order":3}`)
	require.NoError(t, err)
	d := pollOne(t, billing)
	require.NoError(t, billing.Fail(d.LeaseID, errors.New("no such customer")))
	status, res = consolePost(t, web.URL+"/api/actions/discard", url.Values{"all": {"yes"}, "error": {"customer"}})
	require.Equal(t, http.StatusOK, status, res.Error)
	assert.Equal(t, 1, res.Count)
	left, err := natsleasebus.FetchDeadLetters[string](ctx, bus, "orders", "billing", 0)
	require.NoError(t, err)
	assert.Empty(t, left)

	// Shipping holds 3: purged.
	status, res = consolePost(t, web.URL+"/api/actions/purge", url.Values{"topic": {"orders"}, "name": {"shipping"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusOK, status, res.Error)
	assert.Equal(t, 3, res.Count)
	assert.Empty(t, shipping.TryPoll(10))

	// Paused, billing's Polls wait while publishes go on; resumed, they
	// lease again.
	status, res = consolePost(t, web.URL+"/api/actions/pause", url.Values{"topic": {"orders"}, "name": {"billing"}})
	require.Equal(t, http.StatusOK, status, res.Error)
	_, err = natsleasebus.Publish(ctx, bus, "orders", `{"order":4}`)
	require.NoError(t, err)
	consoleJSON(t, web.URL+"/api/overview", &o)
	for _, r := range o.Subscriptions {
		assert.Equal(t, r.Name == "billing", r.Paused, r.Name)
	}
	assert.Empty(t, billing.TryPoll(1), "the server holds a paused consumer's pulls")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // bounds a wait that must not end with a message
	ds, err := billing.Poll(short, 1)
	cancel()
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Empty(t, ds)
	status, res = consolePost(t, web.URL+"/api/actions/resume", url.Values{"topic": {"orders"}, "name": {"billing"}})
	require.Equal(t, http.StatusOK, status, res.Error)
	assert.Equal(t, `{"order":4}`, pollOne(t, billing).Payload)
	_, page = consoleGet(t, web.URL+"/")
	assert.True(t, strings.Contains(page, ">billing</a>"), "the overview page lists billing")
}

func TestConsoleBackendRefusesBadArguments(t *testing.T) {
	_, err := natsleasebus.ConsoleBackend[string](nil)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()))
	_, err = natsleasebus.ConsoleBackend[int](bus, natsleasebus.WithCodec(queue.StringCodec()))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}
