package console_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"net/http/httptest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/queue"
)

func TestFixThePayloadRedriveAndWatchItGetAcked(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	ref := s.dead.ID.String() + "/billing"
	status, _, h := post(t, srv.URL+"/actions/redrive-edited", url.Values{
		"ref": {ref}, "kind": {"json"}, "back": {"/dead-letters"},
		"payload": {"{\n  \"order\": 2,\n  \"card\": \"4111\"\n}"},
	})
	require.Equal(t, http.StatusSeeOther, status)
	loc, err := url.Parse(h.Get("Location"))
	require.NoError(t, err)
	assert.Equal(t, "/dead-letters", loc.Path)
	assert.Equal(t, "Redrove 1 dead letter.", loc.Query().Get("done"))
	_, body := get(t, srv.URL+h.Get("Location"))
	assert.Contains(t, body, "Redrove 1 dead letter.")
	assert.Empty(t, s.b.DeadLetters())

	ds := s.billing.TryPoll(10)
	require.Len(t, ds, 1)
	assert.Equal(t, `{"order":2,"card":"4111"}`, ds[0].Payload, "put back compact, with the edit")
	assert.Equal(t, s.dead.ID, ds[0].ID)
	require.NoError(t, s.billing.Ack(ds[0].LeaseID))
	var o console.Overview
	getJSON(t, srv.URL+"/api/overview", &o)
	assert.Equal(t, uint64(1), o.Subscriptions[0].Acked)

	status, body, _ = post(t, srv.URL+"/actions/redrive-edited", url.Values{"ref": {ref}, "payload": {"x"}})
	assert.Equal(t, http.StatusNotFound, status, "gone from the store: %s", body)
}

func TestRedriveAndDiscardSelectedOrAllMatching(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithMaxAttempts(1)))
	sub := brokertest.Subscribe(t, b, "jobs", "w")
	msgs := brokertest.Publish(t, b, "jobs", "a", "b", "c", "d")
	for i, d := range sub.TryPoll(4) {
		cause := "timeout"
		if i%2 == 0 {
			cause = "bad input"
		}
		require.NoError(t, sub.Fail(d.LeaseID, errors.New(cause)))
	}
	mock.Add(0)
	require.Len(t, b.DeadLetters(), 4)
	srv := serve(t, b)
	api := srv.URL + "/api/actions/"

	var res console.Result
	status, body, _ := post(t, api+"redrive", url.Values{"ref": {msgs[0].ID.String() + "/w", msgs[2].ID.String() + "/w"}})
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, jsonOf(body, &res))
	assert.Equal(t, console.Result{Action: "redrive", Count: 2}, res)
	assert.Equal(t, []string{"a", "c"}, payloads(sub.TryPoll(10)))

	status, body, _ = post(t, api+"discard", url.Values{"all": {"yes"}, "error": {"timeout"}})
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, jsonOf(body, &res))
	assert.Equal(t, 2, res.Count)
	assert.Empty(t, b.DeadLetters())
	assert.Equal(t, uint64(2), b.DeadLetterStats().Discarded)

	status, body, _ = post(t, api+"redrive", url.Values{})
	assert.Equal(t, http.StatusBadRequest, status, "no selection never means all: %s", body)
	status, _, _ = post(t, api+"discard", url.Values{"ref": {"not-a-ref"}})
	assert.Equal(t, http.StatusBadRequest, status)
	status, _, _ = post(t, api+"discard", url.Values{"all": {"yes"}, "reason": {"boredom"}})
	assert.Equal(t, http.StatusBadRequest, status)
}

func jsonOf(body string, v any) error { return jsonUnmarshal([]byte(body), v) }

func payloads(ds []queue.Delivery[string]) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Payload)
	}
	return out
}

func TestPausePurgeAndResume(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	form := url.Values{"topic": {"orders"}, "name": {"shipping"}, "back": {"/subscription?topic=orders&name=shipping"}}
	status, _, h := post(t, srv.URL+"/actions/pause", form)
	require.Equal(t, http.StatusSeeOther, status)
	assert.True(t, strings.HasPrefix(h.Get("Location"), "/subscription?"), h.Get("Location"))
	assert.True(t, s.shipping.Stats().Paused)
	assert.Empty(t, s.shipping.TryPoll(1))
	_, body := get(t, srv.URL+h.Get("Location"))
	assert.Contains(t, body, "Paused.")
	assert.Contains(t, body, `id="resume"`)

	status, body, _ = post(t, srv.URL+"/api/actions/purge", form)
	assert.Equal(t, http.StatusBadRequest, status, "purge without confirm=yes: %s", body)
	assert.Equal(t, 3, s.shipping.Stats().Visible+s.shipping.Stats().Delayed)
	form.Set("confirm", "yes")
	status, body, _ = post(t, srv.URL+"/api/actions/purge", form)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `"count": 3`)

	status, _, _ = post(t, srv.URL+"/actions/resume", form)
	require.Equal(t, http.StatusSeeOther, status)
	assert.False(t, s.shipping.Stats().Paused)

	status, _, _ = post(t, srv.URL+"/actions/pause", url.Values{"topic": {"orders"}, "name": {"nobody"}})
	assert.Equal(t, http.StatusNotFound, status)
}

func TestCrossOriginActionsAreRefused(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	form := url.Values{"topic": {"orders"}, "name": {"shipping"}, "confirm": {"yes"}}
	for _, h := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Sec-Fetch-Site", "", "Origin", "https://evil.example"},
	} {
		for _, path := range []string{"/actions/purge", "/api/actions/purge", "/actions/pause"} {
			status, _, _ := post(t, srv.URL+path, form, h...)
			assert.Equal(t, http.StatusForbidden, status, "%v %s", h, path)
		}
	}
	st := s.shipping.Stats()
	assert.Equal(t, 3, st.Visible+st.Delayed, "nothing purged")
	assert.False(t, st.Paused)

	status, _ := get(t, srv.URL+"/actions/purge?topic=orders&name=shipping&confirm=yes")
	assert.Equal(t, http.StatusMethodNotAllowed, status, "nothing changes on a GET")
}

func TestReadOnlyShowsNoActions(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b, console.WithReadOnly())
	ref := s.dead.ID.String() + "/billing"
	for _, page := range []string{"/", "/subscription?topic=orders&name=billing", "/dead-letters", "/dead-letter?ref=" + url.QueryEscape(ref)} {
		status, body := get(t, srv.URL+page)
		require.Equal(t, http.StatusOK, status, page)
		assert.Contains(t, body, "read-only", page)
		assert.NotContains(t, body, `method="post"`, page)
	}
	for _, a := range []string{"pause", "purge", "redrive", "discard", "redrive-edited"} {
		status, _, _ := post(t, srv.URL+"/api/actions/"+a, url.Values{"topic": {"orders"}, "name": {"billing"}, "ref": {ref}, "confirm": {"yes"}, "payload": {"{}"}})
		assert.Equal(t, http.StatusForbidden, status, a)
	}
	assert.Len(t, s.b.DeadLetters(), 1)
	assert.False(t, s.billing.Stats().Paused)
}

func TestMountedUnderAPrefix(t *testing.T) {
	s := newShop(t)
	c, err := console.New(s.b, console.WithPrefix("/ops/queues"))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/ops/queues/", c)
	mux.Handle("/ops/queues", c)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("host")) })
	srv := newServer(t, mux)

	status, body := get(t, srv+"/ops/queues/")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `href="/ops/queues/subscription?name=billing&amp;topic=orders"`)
	assert.Contains(t, body, `href="/ops/queues/static/console.css"`)
	assert.NotContains(t, body, `href="/subscription`)
	status, _ = get(t, srv+"/ops/queues/static/console.js")
	assert.Equal(t, http.StatusOK, status)
	status, body = get(t, srv+"/ops/queues")
	assert.Equal(t, http.StatusOK, status, "redirected to the prefix with a slash")
	assert.Contains(t, body, "Subscriptions")
	_, body = get(t, srv+"/elsewhere")
	assert.Equal(t, "host", body)

	status, _, h := post(t, srv+"/ops/queues/actions/pause", url.Values{"topic": {"orders"}, "name": {"billing"}, "back": {"/subscription?topic=orders&name=billing"}})
	require.Equal(t, http.StatusSeeOther, status)
	assert.True(t, strings.HasPrefix(h.Get("Location"), "/ops/queues/subscription?"), h.Get("Location"))
	status, _, h = post(t, srv+"/ops/queues/actions/resume", url.Values{"topic": {"orders"}, "name": {"billing"}, "back": {"//evil.example/x"}})
	require.Equal(t, http.StatusSeeOther, status)
	assert.True(t, strings.HasPrefix(h.Get("Location"), "/ops/queues/?"), "never sent off the console: %s", h.Get("Location"))

	// The message page's forms go back under the prefix, once.
	_, body = get(t, srv+"/ops/queues/message?topic=orders&name=shipping&id="+s.dead.ID.String())
	assert.Contains(t, body, `action="/ops/queues/actions/message-delete"`)
	assert.Contains(t, body, `name="back" value="/subscription?name=shipping&amp;topic=orders"`)
	assert.Contains(t, body, `action="/ops/queues/search"`)

	// A handler given a path outside its prefix says so.
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ops/queuesX/", nil))
	assert.Equal(t, http.StatusNotFound, rec.Code)
}

func TestHostileTextIsShownAsText(t *testing.T) {
	b, _ := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithMaxAttempts(1)))
	sub := brokertest.Subscribe(t, b, "t", "s")
	_, err := b.Publish(ctx, "t", hostile, broker.WithKey(hostile), broker.WithHeaders(map[string]string{hostile: hostile}))
	require.NoError(t, err)
	_, err = b.Publish(ctx, "t", hostile, broker.WithKey(hostile), broker.WithHeaders(map[string]string{hostile: hostile}))
	require.NoError(t, err)
	d := sub.TryPoll(1)
	require.Len(t, d, 1)
	require.NoError(t, sub.Fail(d[0].LeaseID, errors.New(hostile)))
	srv := serve(t, b)
	ref := d[0].ID.String() + "/s"
	for _, page := range []string{"/", "/subscription?topic=t&name=s", "/dead-letters", "/dead-letter?ref=" + url.QueryEscape(ref)} {
		status, body := get(t, srv.URL+page)
		require.Equal(t, http.StatusOK, status, page)
		assert.NotContains(t, body, "<script>alert", page)
		if page != "/" {
			assert.Contains(t, body, "&lt;script&gt;alert(", page)
		}
	}
	status, body := get(t, srv.URL+"/subscription?topic=t&name="+url.QueryEscape(hostile))
	assert.Equal(t, http.StatusNotFound, status)
	assert.NotContains(t, body, "<script>alert")
	_, _, h := post(t, srv.URL+"/actions/pause", url.Values{"topic": {"t"}, "name": {"s"}, "back": {"/?x=" + hostile}})
	_, body = get(t, srv.URL+h.Get("Location"))
	assert.NotContains(t, body, "<script>alert")
}

func TestSecurityHeaders(t *testing.T) {
	srv := serve(t, newShop(t).b)
	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	assert.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'")
}

func TestNewRefusesBadArguments(t *testing.T) {
	b, _ := brokertest.New[string](t)
	for name, f := range map[string]func() error{
		"nil broker":  func() error { _, err := console.New[string](nil); return err },
		"zero option": func() error { _, err := console.New(b, console.Option{}); return err },
		"no slash":    func() error { _, err := console.New(b, console.WithPrefix("ops")); return err },
		"end slash":   func() error { _, err := console.New(b, console.WithPrefix("/ops/")); return err },
	} {
		assert.ErrorIs(t, f(), queue.ErrInvalidArgument, name)
	}
}

func TestAClosedBrokerAnswersUnavailable(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	require.NoError(t, s.b.Close())
	status, _ := get(t, srv.URL+"/")
	assert.Equal(t, http.StatusOK, status, "an empty overview")
	status, _, _ = post(t, srv.URL+"/api/actions/redrive", url.Values{"all": {"yes"}})
	assert.Equal(t, http.StatusServiceUnavailable, status)
}

// TestDeadLettersOfOneNameOnTwoTopics: a pattern subscription and an exact
// one share a name, and both dead-letter the same message. The console
// tells them apart by topic: counts, filters, the letter's page and a
// redrive by ref touch one subscription's letter, not both.
func TestDeadLettersOfOneNameOnTwoTopics(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithMaxAttempts(1)))
	exact := brokertest.Subscribe(t, b, "orders.eu", "worker")
	pattern, err := b.Subscribe("orders.*", "worker")
	require.NoError(t, err)
	msgs := brokertest.Publish(t, b, "orders.eu", "x")
	for _, s := range []*broker.Subscription[string]{exact, pattern} {
		ds := s.TryPoll(1)
		require.Len(t, ds, 1)
		require.NoError(t, s.Fail(ds[0].LeaseID, errors.New("boom on "+s.Topic())))
	}
	mock.Add(0)
	require.Len(t, b.DeadLetters(), 2)
	srv := serve(t, b)

	var o console.Overview
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/overview", &o))
	require.Len(t, o.Subscriptions, 2)
	for _, r := range o.Subscriptions {
		assert.Equal(t, 1, r.DeadLettersHeld, "%s/%s", r.Topic, r.Name)
	}
	var v console.SubscriptionView
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/subscription?topic=orders.*&name=worker", &v))
	assert.Equal(t, 1, v.Row.DeadLettersHeld)

	var l console.DeadLetterList
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/dead-letters?subscription=worker&topic=orders.eu", &l))
	require.Equal(t, 1, l.Total)
	assert.Equal(t, "boom on orders.eu", l.Letters[0].LastError)
	ref := l.Letters[0].Ref
	assert.Equal(t, msgs[0].ID.String()+"/worker orders.eu", ref)
	_, body := get(t, srv.URL+"/dead-letter?ref="+url.QueryEscape(ref))
	assert.Contains(t, body, "boom on orders.eu")
	assert.NotContains(t, body, "boom on orders.*")

	status, body, _ := post(t, srv.URL+"/api/actions/redrive", url.Values{"ref": {ref}})
	require.Equal(t, http.StatusOK, status, body)
	var res console.Result
	require.NoError(t, jsonOf(body, &res))
	assert.Equal(t, 1, res.Count)
	assert.Len(t, exact.TryPoll(10), 1, "the exact subscription's letter is back")
	assert.Empty(t, pattern.TryPoll(10), "the pattern's stays dead")
	left := b.DeadLetters()
	require.Len(t, left, 1)
	assert.Equal(t, "orders.*", left[0].Topic)

	// A ref without a topic names the letter of that name on any topic.
	status, body, _ = post(t, srv.URL+"/api/actions/discard", url.Values{"ref": {msgs[0].ID.String() + "/worker"}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Empty(t, b.DeadLetters())
}

// Under a prefix, an unclean path (a double slash, a dot segment, encoded
// or not) is redirected to its clean form under the prefix, never off it.
func TestUncleanPathsStayUnderThePrefix(t *testing.T) {
	s := newShop(t)
	c, err := console.New(s.b, console.WithPrefix("/ops/queues"))
	require.NoError(t, err)
	for target, want := range map[string]string{
		"/ops/queues//dead-letters":                  "/ops/queues/dead-letters",
		"/ops/queues/%2e%2e/x":                       "/ops/queues/x",
		"/ops/queues/..%2f..%2fconsole.go":           "/ops/queues/console.go",
		"/ops/queues/static/..%2f..%2fconsole.go":    "/ops/queues/console.go",
		"/ops/queues/./subscription?topic=t&name=n":  "/ops/queues/subscription?topic=t&name=n",
		"/ops/queues/static/../../../../etc/passwd":  "/ops/queues/etc/passwd",
		"/ops/queues/dead-letters/.":                 "/ops/queues/dead-letters",
		"/ops/queues///":                             "/ops/queues/",
		"/ops/queues/static//console.css":            "/ops/queues/static/console.css",
		"/ops/queues/api/../api/overview?format=raw": "/ops/queues/api/overview?format=raw",
	} {
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		assert.Equal(t, http.StatusTemporaryRedirect, rec.Code, target)
		assert.Equal(t, want, rec.Header().Get("Location"), target)
	}
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ops/queues/dead-letters", nil))
	assert.Equal(t, http.StatusOK, rec.Code, "a clean path is served")
}
