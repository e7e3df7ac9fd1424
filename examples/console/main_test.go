package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/poller"
)

// The demo's promise, kept from the console alone: two orders die on
// billing, one with "card declined"; fixing its card and redriving it gets
// it acked.
func TestFixADeclinedCardFromTheConsole(t *testing.T) {
	s, err := open(context.Background(), 0, io.Discard)
	require.NoError(t, err)
	defer s.close()
	c, err := console.New(s.b)
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()

	for dead := 0; dead < 2; {
		if e := <-s.events; e.Outcome == poller.OutcomeDeadLettered {
			dead++
		}
	}
	var letters console.DeadLetterList
	getJSON(t, srv.URL+"/api/dead-letters?subscription=billing&error=declined", &letters)
	require.Equal(t, 1, letters.Total)
	l := letters.Letters[0]
	assert.Equal(t, "max-attempts", l.Reason)
	assert.Equal(t, 3, l.Attempts)
	assert.Contains(t, l.Payload.Text, declinedCard)

	var sub console.SubscriptionView
	getJSON(t, srv.URL+"/api/subscription?topic=orders&name=shipping", &sub)
	states := map[string]int{}
	for _, m := range sub.Messages {
		states[m.State]++
	}
	assert.Equal(t, map[string]int{"in-flight": 2, "visible": 2, "held-back": 8, "delayed": 3}, states)

	fixed := strings.Replace(l.Payload.Text, declinedCard, goodCard, 1)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/actions/redrive-edited",
		strings.NewReader(url.Values{"ref": {l.Ref}, "kind": {l.Payload.Kind}, "payload": {fixed}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for {
		e := <-s.events
		if e.Delivery.ID == l.ID {
			require.Equal(t, poller.OutcomeAcked, e.Outcome)
			assert.Equal(t, goodCard, e.Delivery.Payload.Card)
			break
		}
	}
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}
