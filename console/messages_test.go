package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/queue"
)

func TestActOnOneHeldMessage(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	delayed, err := s.shipping.Peek(queue.PeekQuery{State: queue.StateDelayed, Limit: 1})
	require.NoError(t, err)
	require.Len(t, delayed, 1)
	id := delayed[0].ID.String()
	form := func(kv ...string) url.Values {
		v := url.Values{"topic": {"orders"}, "name": {"shipping"}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return v
	}

	// The message page offers each action.
	_, page := get(t, srv.URL+"/message?topic=orders&name=shipping&id="+id)
	for _, want := range []string{`id="make-visible"`, `id="delete"`, `id="save-payload"`} {
		assert.Contains(t, page, want)
	}

	// Edit: same ID and place, the new payload.
	status, _, h := post(t, srv.URL+"/actions/message-edit", form("id", id, "kind", "json", "payload", "{\"order\": 3, \"gift\": true}", "back", "/message?id="+id))
	require.Equal(t, http.StatusSeeOther, status)
	loc, err := url.Parse(h.Get("Location"))
	require.NoError(t, err)
	assert.Equal(t, "Edited the payload: the next delivery carries it.", loc.Query().Get("done"))
	got, err := s.shipping.Peek(queue.PeekQuery{ID: delayed[0].ID, Limit: 1})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, `{"order":3,"gift":true}`, got[0].Payload, "compact, as the original was")
	assert.Equal(t, delayed[0].Seq, got[0].Seq)
	billing, err := s.billing.Peek(queue.PeekQuery{ID: delayed[0].ID, Limit: 1})
	require.NoError(t, err)
	assert.Equal(t, `{"order":3}`, billing[0].Payload, "billing's copy is its own")

	// Make visible: no clock moves, and it is delivered.
	status, body, _ := post(t, srv.URL+"/api/actions/message-visible", form("id", id))
	require.Equal(t, http.StatusOK, status, body)
	var res console.Result
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.Equal(t, 1, res.Count)
	assert.Equal(t, 3, s.shipping.Stats().Visible)

	// Delete needs its confirmation, then drops the selected ones.
	ids := []string{s.dead.ID.String(), id}
	status, body, _ = post(t, srv.URL+"/api/actions/message-delete", form("id", ids[0], "id", ids[1]))
	assert.Equal(t, http.StatusBadRequest, status, body)
	status, body, _ = post(t, srv.URL+"/api/actions/message-delete", form("id", ids[0], "id", ids[1], "confirm", "yes"))
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.Equal(t, 2, res.Count)
	st := s.shipping.Stats()
	assert.Equal(t, 1, st.Visible)
	assert.Equal(t, uint64(2), st.Dropped)

	// Gone: the page and the actions say so.
	status, _ = get(t, srv.URL+"/message?topic=orders&name=shipping&id="+id)
	assert.Equal(t, http.StatusNotFound, status)
	status, body, _ = post(t, srv.URL+"/api/actions/message-edit", form("id", id, "payload", "x"))
	assert.Equal(t, http.StatusNotFound, status, body)
	status, body, _ = post(t, srv.URL+"/api/actions/message-delete", form("id", id, "confirm", "yes"))
	assert.Equal(t, http.StatusNotFound, status, body)
	status, body, _ = post(t, srv.URL+"/api/actions/message-visible", form("id", "not-an-id"))
	assert.Equal(t, http.StatusBadRequest, status, body)
	status, body, _ = post(t, srv.URL+"/api/actions/message-visible", form())
	assert.Equal(t, http.StatusBadRequest, status, "nothing selected means nothing, not all: %s", body)
}

func TestDeleteAllMatchingActsOnAPage(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	status, body, _ := post(t, srv.URL+"/api/actions/message-delete", url.Values{
		"topic": {"orders"}, "name": {"shipping"}, "all": {"yes"}, "state": {"visible"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `"count": 2`)
	st := s.shipping.Stats()
	assert.Equal(t, 0, st.Visible)
	assert.Equal(t, 1, st.Delayed, "another state is left alone")
	_, page := get(t, srv.URL+"/subscription?topic=orders&name=shipping")
	assert.Contains(t, page, `id="delete-selected"`)
	_, page = get(t, srv.URL+"/subscription?topic=orders&name=shipping&state=delayed")
	assert.Contains(t, page, `id="visible-all"`)

	status, body, _ = post(t, srv.URL+"/api/actions/message-visible", url.Values{
		"topic": {"orders"}, "name": {"shipping"}, "all": {"yes"}, "state": {"delayed"}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `"count": 1`)
	assert.Equal(t, 1, s.shipping.Stats().Visible)
	status, body, _ = post(t, srv.URL+"/api/actions/message-visible", url.Values{
		"topic": {"orders"}, "name": {"shipping"}, "all": {"yes"}, "state": {"delayed"}})
	assert.Equal(t, http.StatusNotFound, status, "none left to match: %s", body)
}

func TestHeldMessageActionsRefusedReadOnly(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b, console.WithReadOnly())
	status, _, _ := post(t, srv.URL+"/api/actions/message-delete", url.Values{
		"topic": {"orders"}, "name": {"shipping"}, "id": {s.dead.ID.String()}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusForbidden, status)
	_, page := get(t, srv.URL+"/message?topic=orders&name=shipping&id="+s.dead.ID.String())
	assert.NotContains(t, page, `id="delete"`)
	assert.Equal(t, 2, s.shipping.Stats().Visible)
}
