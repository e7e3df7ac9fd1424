package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/queue"
)

// plainBackend is a backend that does only what Backend asks (no peek,
// pause, purge, discard or edit), over a broker, as a remote backend
// would: its subscriptions carry a note, and an error can be injected.
type plainBackend struct {
	b    *broker.Broker[string]
	fail error // every call fails with it, when set
}

const plainNote = "this backend keeps no counters"

func (p *plainBackend) Now() time.Time { return p.b.Clock().Now() }

func (p *plainBackend) Subscriptions(ctx context.Context) ([]console.SubscriptionInfo, error) {
	if p.fail != nil {
		return nil, p.fail
	}
	var out []console.SubscriptionInfo
	for _, s := range p.b.AllSubscriptions() {
		out = append(out, p.info(s))
	}
	return out, nil
}

func (p *plainBackend) info(s *broker.Subscription[string]) console.SubscriptionInfo {
	st := s.Stats()
	return console.SubscriptionInfo{Topic: s.Topic(), Name: s.Name(), Note: plainNote,
		Stats:   queue.Stats{Visible: st.Visible, InFlight: st.InFlight},
		Options: []console.Setting{{Option: "WithVisibilityTimeout", Value: s.Config().VisibilityTimeout.String()}}}
}

func (p *plainBackend) Subscription(ctx context.Context, topic, name string) (console.SubscriptionInfo, error) {
	if p.fail != nil {
		return console.SubscriptionInfo{}, p.fail
	}
	s, err := p.b.Subscription(topic, name)
	if err != nil {
		return console.SubscriptionInfo{}, err
	}
	return p.info(s), nil
}

func (p *plainBackend) DeadLetters(ctx context.Context) ([]queue.DeadLetter[string], error) {
	if p.fail != nil {
		return nil, p.fail
	}
	return p.b.DeadLetters(), nil
}

func (p *plainBackend) Redrive(ctx context.Context, match func(queue.DeadLetter[string]) bool) (int, error) {
	if p.fail != nil {
		return 0, p.fail
	}
	return p.b.Redrive(match)
}

func servePlain(t *testing.T, be console.Backend[string], opts ...console.Option) *httptest.Server {
	t.Helper()
	c, err := console.NewFor(be, opts...)
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return srv
}

func TestABackendShowsWhatItCanAndOffersOnlyItsActions(t *testing.T) {
	s := newShop(t)
	srv := servePlain(t, &plainBackend{b: s.b})

	status, body := get(t, srv.URL+"/")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `title="`+plainNote+`">partial</span>`)
	var o console.Overview
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/overview", &o))
	require.Len(t, o.Subscriptions, 3)
	assert.Equal(t, plainNote, o.Subscriptions[0].Note)
	assert.Equal(t, 1, o.DeadLetters.Held)

	status, body = get(t, srv.URL+"/subscription?topic=orders&name=billing")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `id="no-peek"`)
	assert.Contains(t, body, `id="note"`)
	for _, id := range []string{`id="pause"`, `id="purge"`, `id="messages"`} {
		assert.NotContains(t, body, id)
	}
	var v console.SubscriptionView
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/subscription?topic=orders&name=billing", &v))
	assert.Empty(t, v.Messages)
	assert.Equal(t, 1, v.Row.DeadLettersHeld)
	assert.Equal(t, "WithVisibilityTimeout", v.Options[0].Option)

	ref := s.dead.ID.String() + "/billing"
	_, body = get(t, srv.URL+"/dead-letter?ref="+url.QueryEscape(ref))
	assert.Contains(t, body, `id="redrive"`)
	assert.NotContains(t, body, `id="discard"`)
	assert.NotContains(t, body, `id="redrive-edited"`)
	_, body = get(t, srv.URL+"/dead-letters")
	assert.Contains(t, body, `id="redrive-all"`)
	assert.NotContains(t, body, `id="discard-all"`)

	for _, a := range []struct {
		name string
		form url.Values
	}{
		{"pause", url.Values{"topic": {"orders"}, "name": {"billing"}}},
		{"resume", url.Values{"topic": {"orders"}, "name": {"billing"}}},
		{"purge", url.Values{"topic": {"orders"}, "name": {"billing"}, "confirm": {"yes"}}},
		{"discard", url.Values{"ref": {ref}}},
		{"redrive-edited", url.Values{"ref": {ref}, "payload": {"{}"}, "kind": {"json"}}},
	} {
		status, body, _ := post(t, srv.URL+"/api/actions/"+a.name, a.form)
		assert.Equal(t, http.StatusNotImplemented, status, a.name)
		var res console.Result
		require.NoError(t, jsonOf(body, &res), a.name)
		assert.Contains(t, res.Error, "this backend cannot", a.name)
		assert.Contains(t, res.Error, errors.ErrUnsupported.Error(), a.name)
	}
	assert.Len(t, s.b.DeadLetters(), 1, "nothing the refused actions did")

	status, body, _ = post(t, srv.URL+"/api/actions/redrive", url.Values{"ref": {ref}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Empty(t, s.b.DeadLetters())
	assert.Len(t, s.billing.TryPoll(10), 1, "redriven through the backend")
}

func TestABackendsErrorsAnswerWithTheirStatus(t *testing.T) {
	s := newShop(t)
	be := &plainBackend{b: s.b}
	srv := servePlain(t, be)

	status, _ := get(t, srv.URL+"/subscription?topic=orders&name=nobody")
	assert.Equal(t, http.StatusNotFound, status)

	be.fail = errors.New("server unreachable")
	for _, path := range []string{"/", "/api/overview", "/subscription?topic=orders&name=billing", "/api/dead-letters", "/dead-letters",
		"/dead-letter?ref=" + url.QueryEscape(s.dead.ID.String()+"/billing")} {
		status, body := get(t, srv.URL+path)
		assert.Equal(t, http.StatusInternalServerError, status, path)
		assert.Contains(t, body, "server unreachable", path)
	}
	be.fail = queue.ErrClosed
	status, _, _ = post(t, srv.URL+"/api/actions/redrive", url.Values{"all": {"yes"}})
	assert.Equal(t, http.StatusServiceUnavailable, status)
}

func TestNewForRefusesANilBackend(t *testing.T) {
	_, err := console.NewFor[string](nil)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}
