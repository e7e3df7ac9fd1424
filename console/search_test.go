package console_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
)

func TestSearchFindsByIDDedupIDAndKey(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	m9, err := s.b.Publish(context.Background(), "orders", `{"order":9}`, broker.WithDedupID("order-9"))
	require.NoError(t, err)

	where := func(v console.SearchView) (held []string, letters []string) {
		for _, h := range v.Held {
			held = append(held, h.Match+" "+h.Subscription+" "+h.State)
		}
		for _, l := range v.Letters {
			letters = append(letters, l.Match+" "+l.Subscription+" "+l.Reason)
		}
		return held, letters
	}
	var v console.SearchView

	// By message ID: the copy shipping holds, and billing's dead letter.
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/search?q="+s.dead.ID.String(), &v))
	held, letters := where(v)
	assert.Equal(t, []string{"id shipping visible"}, held)
	assert.Equal(t, []string{"id billing max-attempts"}, letters)
	assert.Empty(t, v.Dedup)

	// By dedup ID: the topic's record, and the message it named.
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/search?q=order-9", &v))
	require.Len(t, v.Dedup, 1)
	assert.Equal(t, "orders", v.Dedup[0].Topic)
	assert.Equal(t, m9.ID, v.Dedup[0].MessageID)
	held, letters = where(v)
	assert.Equal(t, []string{"dedup id billing visible", "dedup id shipping visible"}, held)
	assert.Empty(t, letters)

	// By key: the delayed message in both subscriptions.
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/search?q=cust-7", &v))
	held, _ = where(v)
	assert.Equal(t, []string{"key billing delayed", "key shipping delayed"}, held)

	// Nothing matches: empty lists, not nulls.
	status, body := get(t, srv.URL+"/api/search?q=nothing-like-it")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"held": []`)
	assert.Contains(t, body, `"letters": []`)

	// The page: links to the held message and to the dead letter; the
	// header's box searches from every page.
	_, page := get(t, srv.URL+"/search?q="+s.dead.ID.String())
	assert.Contains(t, page, `/message?id=`+s.dead.ID.String()+`&amp;name=shipping&amp;topic=orders`)
	assert.Contains(t, page, `/dead-letter?ref=`+s.dead.ID.String())
	_, overview := get(t, srv.URL+"/")
	assert.Contains(t, overview, `id="search-q"`)
}

func TestMessagePageShowsOneHeldMessage(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	var v console.MessageView
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/message?topic=orders&name=shipping&id="+s.dead.ID.String(), &v))
	assert.Equal(t, s.dead.ID, v.Message.ID)
	assert.Equal(t, "visible", v.Message.State)
	assert.JSONEq(t, `{"order":2,"card":"0000"}`, v.Message.Payload.Text)
	status, page := get(t, srv.URL+"/message?topic=orders&name=shipping&id="+s.dead.ID.String())
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, `id="payload"`)

	// Billing dead-lettered it: it holds it no more.
	status, _ = get(t, srv.URL+"/message?topic=orders&name=billing&id="+s.dead.ID.String())
	assert.Equal(t, http.StatusNotFound, status)
	status, _ = get(t, srv.URL+"/api/message?topic=orders&name=billing&id=not-an-id")
	assert.Equal(t, http.StatusBadRequest, status)
	status, _ = get(t, srv.URL+"/api/message?topic=orders&name=nobody&id="+s.dead.ID.String())
	assert.Equal(t, http.StatusNotFound, status)
}
