package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/queue"
)

var ctx = context.Background()

const hostile = `<script>alert("x")</script>`

// shop is a broker like the demo's: orders fanned out to billing and
// shipping, one order dead-lettered on billing with "card declined".
type shop struct {
	b        *broker.Broker[string]
	mock     *clock.Mock
	billing  *broker.Subscription[string]
	shipping *broker.Subscription[string]
	dead     queue.Message[string]
}

func newShop(t *testing.T) *shop {
	t.Helper()
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithMaxAttempts(1)))
	s := &shop{b: b, mock: mock}
	s.billing = brokertest.Subscribe(t, b, "orders", "billing")
	s.shipping = brokertest.Subscribe(t, b, "orders", "shipping")
	_, err := b.Subscribe("orders.>", "audit")
	require.NoError(t, err)
	msgs := brokertest.Publish(t, b, "orders", `{"order":1,"card":"4242"}`, `{"order":2,"card":"0000"}`)
	s.dead = msgs[1]
	_, err = b.Publish(ctx, "orders", `{"order":3}`, broker.WithDelay(time.Minute), broker.WithKey("cust-7"))
	require.NoError(t, err)
	ds := s.billing.TryPoll(2)
	require.Len(t, ds, 2)
	require.NoError(t, s.billing.Fail(ds[1].LeaseID, errors.New("card declined")))
	return s
}

func serve(t *testing.T, b *broker.Broker[string], opts ...console.Option) *httptest.Server {
	t.Helper()
	c, err := console.New(b, opts...)
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return srv
}

// get returns a GET's status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	status, body := get(t, url)
	require.NoError(t, json.Unmarshal([]byte(body), v), body)
	return status
}

// post sends a form as the console's own page would (same origin), with
// the extra headers given as name, value pairs, without following a
// redirect.
func post(t *testing.T, target string, form url.Values, headers ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body), resp.Header
}

func TestOverviewListsEverySubscription(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	status, body := get(t, srv.URL+"/")
	require.Equal(t, http.StatusOK, status)
	for _, want := range []string{"billing", "shipping", "orders.&gt;", "pattern", "1 held",
		`· since start: <span class="reason">max-attempts 1</span>`, `1 held</a> (of those: <span class="reason">max-attempts 1</span>)`} {
		assert.Contains(t, body, want)
	}

	var o console.Overview
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/overview", &o))
	require.Len(t, o.Subscriptions, 3)
	bill := o.Subscriptions[0]
	assert.Equal(t, "billing", bill.Name)
	assert.Equal(t, uint64(3), bill.Published)
	assert.Equal(t, 1, bill.InFlight)
	assert.Equal(t, 1, bill.Delayed)
	assert.Equal(t, 2, bill.Depth)
	assert.Equal(t, 1, bill.DeadLettersHeld)
	assert.Equal(t, map[string]uint64{"max-attempts": 1}, bill.DeadLetteredBy)
	assert.Equal(t, "orders.>", o.Subscriptions[2].Topic)
	assert.True(t, o.Subscriptions[2].Pattern)
	assert.Equal(t, 1, o.DeadLetters.Held)
	assert.Equal(t, brokertest.Epoch, o.Time.UTC())
}

func TestSubscriptionPagePeeksWithoutLeasing(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	before := s.shipping.Stats()
	var v console.SubscriptionView
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/subscription?topic=orders&name=shipping", &v))
	require.Len(t, v.Messages, 3)
	assert.Equal(t, []string{"visible", "visible", "delayed"}, []string{v.Messages[0].State, v.Messages[1].State, v.Messages[2].State})
	assert.Equal(t, "json", v.Messages[0].Payload.Kind)
	assert.Equal(t, "{\n  \"order\": 1,\n  \"card\": \"4242\"\n}", v.Messages[0].Payload.Text)
	assert.Equal(t, "cust-7", v.Messages[2].Key)
	require.NotNil(t, v.Messages[2].At)
	assert.Equal(t, brokertest.Epoch.Add(time.Minute), v.Messages[2].At.UTC())
	assert.Contains(t, v.Options, console.Setting{Option: "WithMaxAttempts", Value: "1"})
	assert.Equal(t, before, s.shipping.Stats(), "a peek leases nothing")

	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/subscription?topic=orders&name=billing&state=in-flight", &v))
	require.Len(t, v.Messages, 1)
	assert.Equal(t, 1, v.Messages[0].Attempts)
	assert.Equal(t, brokertest.Epoch.Add(queue.DefaultVisibilityTimeout), v.Messages[0].At.UTC())

	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/subscription?topic=orders&name=shipping&limit=2", &v))
	require.Len(t, v.Messages, 2)
	next := v.Next
	require.NotZero(t, next)
	v = console.SubscriptionView{}
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/subscription?topic=orders&name=shipping&limit=2&after="+itoa(next), &v))
	require.Len(t, v.Messages, 1)
	assert.Equal(t, "delayed", v.Messages[0].State)
	assert.Zero(t, v.Next)

	status, body := get(t, srv.URL+"/subscription?topic=orders&name=shipping")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "cust-7")
	assert.Contains(t, body, "WithVisibilityTimeout")

	for q, want := range map[string]int{
		"topic=orders&name=nobody":          http.StatusNotFound,
		"topic=orders":                      http.StatusBadRequest,
		"topic=orders&name=billing&state=x": http.StatusBadRequest,
		"topic=orders&name=billing&after=-": http.StatusBadRequest,
	} {
		status, _ := get(t, srv.URL+"/subscription?"+q)
		assert.Equal(t, want, status, q)
		status, _ = get(t, srv.URL+"/api/subscription?"+q)
		assert.Equal(t, want, status, "api "+q)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestDeadLettersFilterAndShowWhole(t *testing.T) {
	s := newShop(t)
	s.mock.Add(queue.DefaultVisibilityTimeout) // the other billing lease expires: a second letter
	srv := serve(t, s.b)
	var l console.DeadLetterList
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/dead-letters", &l))
	assert.Equal(t, 2, l.Total)
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/dead-letters?error=declined", &l))
	require.Equal(t, 1, l.Total)
	letter := l.Letters[0]
	assert.Equal(t, "card declined", letter.LastError)
	assert.Equal(t, s.dead.ID, letter.ID)
	assert.Equal(t, s.dead.ID.String()+"/billing orders", letter.Ref)
	assert.Equal(t, "orders", letter.SubscriptionTopic)

	for q, want := range map[string]int{
		"reason=max-attempts":        2,
		"subscription=shipping":      0,
		"key=cust-7":                 0,
		"error=expired":              1,
		"since=2030-01-01T00:00:00Z": 0,
		"until=2030-01-01T00:00":     2,
		"since=" + url.QueryEscape("2000-01-01T00:00:00Z"): 2,
	} {
		var l console.DeadLetterList // fresh: decoding into the one above would write into letter's history
		require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/dead-letters?"+q, &l), q)
		assert.Equal(t, want, l.Total, q)
	}
	l = console.DeadLetterList{}
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/dead-letters?limit=1", &l))
	assert.Len(t, l.Letters, 1)
	assert.Equal(t, 1, l.Next)
	status, _ := get(t, srv.URL+"/api/dead-letters?reason=bored")
	assert.Equal(t, http.StatusBadRequest, status)
	status, _ = get(t, srv.URL+"/api/dead-letters?since=yesterday")
	assert.Equal(t, http.StatusBadRequest, status)

	var one console.DeadLetterView
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/dead-letter?ref="+url.QueryEscape(letter.Ref), &one))
	assert.Equal(t, letter, one)
	status, body := get(t, srv.URL+"/dead-letter?ref="+url.QueryEscape(letter.Ref))
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "card declined")
	assert.Contains(t, body, "Redrive with this payload")
	status, _ = get(t, srv.URL+"/dead-letter?ref=nonsense")
	assert.Equal(t, http.StatusBadRequest, status)
	status, _ = get(t, srv.URL+"/dead-letter?ref="+url.QueryEscape(s.dead.ID.String()+"/shipping"))
	assert.Equal(t, http.StatusNotFound, status)
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func newServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A page of dead letters costs what it shows, not what the store holds:
// its allocations do not grow with the store (they grew by six a letter
// when every letter was rendered before the page was cut).
func TestDeadLetterPageCostsWhatItShows(t *testing.T) {
	b, err := broker.New[string](broker.WithDeadLetterLimit(1<<20), broker.WithSubscriptionDefaults(broker.WithMaxQueue(1)))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	require.NoError(t, b.CreateTopic("orders"))
	_, err = b.Subscribe("orders", "billing")
	require.NoError(t, err)
	allocs := map[int]float64{}
	for _, n := range []int{1_000, 30_000} {
		batch := make([]string, n-len(b.DeadLetters())+1) // the first is held
		for i := range batch {
			batch[i] = `{"order":1}`
		}
		_, err := b.PublishBatch(ctx, "orders", batch)
		require.NoError(t, err)
		c, err := console.New(b)
		require.NoError(t, err)
		for _, path := range []string{"/dead-letters", "/api/dead-letters?offset=500", "/api/overview"} {
			allocs[n] += testing.AllocsPerRun(3, func() {
				rec := httptest.NewRecorder()
				c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != http.StatusOK {
					t.Fatalf("%s: %d", path, rec.Code)
				}
			})
		}
	}
	require.Less(t, allocs[30_000], allocs[1_000]*1.5, "allocations at 30,000 letters: %.0f; at 1,000: %.0f", allocs[30_000], allocs[1_000])
}

// The overview explains its figures, and says a rate is being measured
// until it can be; each dead letter has a link to its page; a reference
// that names no letter says so without claiming it was redriven.
func TestFiguresExplained(t *testing.T) {
	s := newShop(t)
	srv := serve(t, s.b)
	_, body := get(t, srv.URL+"/")
	assert.Contains(t, body, `id="glossary"`)
	assert.Contains(t, body, `title="waiting behind an earlier message of its ordering key">Held back</th>`)
	assert.Contains(t, body, `data-f="publishRate" title="measuring: a rate needs two readings, 2 s apart">…</td>`)

	_, body = get(t, srv.URL+"/dead-letters")
	assert.Equal(t, 1, strings.Count(body, `class="details" href=`), "one letter, one link")
	assert.Contains(t, body, `Since (UTC) <input name="since" value="" placeholder="YYYY-MM-DDThh:mm">`)

	status, body := get(t, srv.URL+"/dead-letter?ref="+url.QueryEscape(s.dead.ID.String()+"/nonesuch"))
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, "or the reference names no letter")
}
