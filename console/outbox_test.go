package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/console"
)

// fakeOutbox is an outbox's dead rows in memory.
type fakeOutbox struct {
	mu       sync.Mutex
	rows     []backend.DeadRow
	requeued []int64
	fail     error
}

func (f *fakeOutbox) DeadRowCount(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.rows)), f.fail
}

func (f *fakeOutbox) DeadRows(_ context.Context, after int64, limit int) ([]backend.DeadRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []backend.DeadRow
	for _, r := range f.rows {
		if r.ID > after && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, f.fail
}

func (f *fakeOutbox) take(ids []int64) int64 {
	n := len(f.rows)
	f.rows = slices.DeleteFunc(f.rows, func(r backend.DeadRow) bool { return slices.Contains(ids, r.ID) })
	return int64(n - len(f.rows))
}

func (f *fakeOutbox) RequeueDeadRows(_ context.Context, ids ...int64) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requeued = append(f.requeued, ids...)
	return f.take(ids), nil
}

func (f *fakeOutbox) DiscardDeadRows(_ context.Context, ids ...int64) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.take(ids), nil
}

// The Outbox page lists an outbox's dead rows, why each was moved aside,
// and requeues or discards one, or all; read-only it offers neither, and
// without WithOutbox there is no page.
func TestOutboxDeadRows(t *testing.T) {
	b, _ := brokertest.New[string](t)
	at := brokertest.Epoch
	o := &fakeOutbox{}
	for i := int64(1); i <= 3; i++ {
		o.rows = append(o.rows, backend.DeadRow{ID: i * 10, Topic: "orders..x", Payload: []byte(`{"n":1}`), DedupID: "outbox:d",
			EnqueuedAt: at, DeadAt: at.Add(time.Second), Error: "topic name \"orders..x\" has an <empty> segment"})
	}
	srv := serve(t, b, console.WithOutbox(o))
	status, body := get(t, srv.URL+"/outbox")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `data-row="10"`)
	assert.Contains(t, body, `has an &lt;empty&gt; segment`, "the error is text, escaped")
	assert.Contains(t, body, "Requeue all 3")
	_, overview := get(t, srv.URL+"/")
	assert.Contains(t, overview, `href="/outbox">3 dead rows</a>`)
	var ov console.Overview
	getJSON(t, srv.URL+"/api/overview", &ov)
	require.NotNil(t, ov.OutboxDeadRows)
	assert.Equal(t, int64(3), *ov.OutboxDeadRows)

	var v console.OutboxView
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/outbox", &v))
	require.Len(t, v.Rows, 3)
	assert.Equal(t, int64(3), v.Count)
	assert.Equal(t, "orders..x", v.Rows[0].Topic)
	assert.Equal(t, "json", v.Rows[0].Payload.Kind)
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/outbox?after=10", &v))
	assert.Len(t, v.Rows, 2)

	status, _, hdr := post(t, srv.URL+"/actions/outbox-requeue", url.Values{"id": {"10"}, "back": {"/outbox"}})
	require.Equal(t, http.StatusSeeOther, status)
	loc, err := url.Parse(hdr.Get("Location"))
	require.NoError(t, err)
	assert.Equal(t, "Requeued 1 dead row: the relay publishes them next.", loc.Query().Get("done"))
	assert.Equal(t, []int64{10}, o.requeued)
	var res console.Result
	status, body, _ = post(t, srv.URL+"/api/actions/outbox-discard", url.Values{"all": {"yes"}})
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, jsonOf(body, &res))
	assert.Equal(t, console.Result{Action: "outbox-discard", Count: 2}, res)
	for _, bad := range []url.Values{{}, {"id": {"x"}}} {
		status, body, _ = post(t, srv.URL+"/api/actions/outbox-requeue", bad)
		assert.Equal(t, http.StatusBadRequest, status, body)
	}
	status, body, _ = post(t, srv.URL+"/api/actions/outbox-requeue", url.Values{"all": {"yes"}}, "Sec-Fetch-Site", "cross-site")
	assert.Equal(t, http.StatusForbidden, status, body)

	o.fail = errors.New("database is down")
	_, overview = get(t, srv.URL+"/")
	assert.Contains(t, overview, "the outbox&#39;s dead rows could not be counted: database is down")

	ro := serve(t, b, console.WithOutbox(o), console.WithReadOnly())
	o.fail = nil
	_, body = get(t, ro.URL+"/outbox")
	assert.NotContains(t, body, "outbox-requeue", "no buttons when read-only")
	status, _, _ = post(t, ro.URL+"/api/actions/outbox-requeue", url.Values{"all": {"yes"}})
	assert.Equal(t, http.StatusForbidden, status)

	none := serve(t, b)
	status, _ = get(t, none.URL+"/outbox")
	assert.Equal(t, http.StatusNotFound, status)
	_, overview = get(t, none.URL+"/")
	assert.NotContains(t, overview, `href="/outbox"`)
	if _, err := console.New(b, console.WithOutbox(nil)); err == nil {
		t.Fatal("WithOutbox(nil) accepted")
	}
}
