package pgleasebus_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/pgleasebus"
	"github.com/leasebus/leasebus/queue"
)

func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	status, body := httpGet(t, u)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, status, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatal(err)
	}
}

func postAction(t *testing.T, u string, form url.Values) console.Result {
	t.Helper()
	resp, err := http.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res console.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", u, resp.StatusCode, res.Error)
	}
	return res
}

// On call, from the console alone over PostgreSQL: the subscriptions with
// their counts and settings, what one holds found by key and made
// visible, why a message died, its payload fixed and redriven, another
// discarded, a subscription paused across handles.
func TestConsoleOverPostgres(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	for _, topic := range []string{"orders", "audit"} {
		if err := e.bus.CreateTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	billing, err := pgleasebus.Subscribe(ctx, e.bus, "orders", "billing", queue.StringCodec(), pgleasebus.WithMaxAttempts(2), pgleasebus.WithVisibilityTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgleasebus.Subscribe(ctx, e.bus, "audit", "log", queue.StringCodec()); err != nil {
		t.Fatal(err)
	}
	pub, err := pgleasebus.NewPublisher(e.bus, queue.StringCodec())
	if err != nil {
		t.Fatal(err)
	}
	bad, err := pub.Publish(ctx, "orders", `{"order":1,"card":"0000"}`)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := billing.Poll(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatal(ds, err)
	}
	if err := billing.Reject(ds[0].LeaseID, errors.New(`bad card`)); err != nil {
		t.Fatal(err)
	}
	later, err := pub.Publish(ctx, "orders", "later", queue.WithDelay(time.Hour), queue.WithKey("customer-7"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, "orders", "now"); err != nil {
		t.Fatal(err)
	}

	be, err := pgleasebus.ConsoleBackend(e.bus, queue.StringCodec())
	if err != nil {
		t.Fatal(err)
	}
	c, err := console.NewFor(be)
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(c)
	defer web.Close()

	var o console.Overview
	getJSON(t, web.URL+"/api/overview", &o)
	rows := map[string]console.SubscriptionRow{}
	for _, r := range o.Subscriptions {
		rows[r.Topic+"/"+r.Name] = r
	}
	if len(rows) != 2 || rows["orders/billing"].Visible != 1 || rows["orders/billing"].Delayed != 1 || rows["audit/log"].Visible != 0 || o.DeadLetters.Held != 1 {
		t.Fatalf("overview %+v", o)
	}
	status, page := httpGet(t, web.URL+"/subscription?topic=orders&name=billing")
	if status != http.StatusOK || !strings.Contains(page, "<th>WithMaxAttempts</th><td>2</td>") || !strings.Contains(page, "<th>WithVisibilityTimeout</th><td>1m0s</td>") {
		t.Fatalf("billing's page: %d\n%s", status, page)
	}
	if status, _ := httpGet(t, web.URL+"/subscription?topic=orders&name=nobody"); status != http.StatusNotFound {
		t.Fatalf("an unknown subscription's page: %d", status)
	}

	// Found by its key, made visible now.
	var sv console.SearchView
	getJSON(t, web.URL+"/api/search?q=customer-7", &sv)
	if len(sv.Held) != 1 || sv.Held[0].ID != later.ID || sv.Held[0].State != queue.StateDelayed.String() {
		t.Fatalf("search by key: %+v", sv)
	}
	res := postAction(t, web.URL+"/api/actions/message-visible", url.Values{"topic": {"orders"}, "name": {"billing"}, "id": {later.ID.String()}})
	if res.Count != 1 {
		t.Fatalf("message-visible: %+v", res)
	}
	var view console.SubscriptionView
	getJSON(t, web.URL+"/api/subscription?topic=orders&name=billing", &view)
	if view.Row.Visible != 2 || view.Row.Delayed != 0 || len(view.Messages) != 2 {
		t.Fatalf("billing after message-visible: %+v", view)
	}

	// The dead letter, fixed and redriven.
	var l console.DeadLetterList
	getJSON(t, web.URL+"/api/dead-letters", &l)
	if len(l.Letters) != 1 || l.Letters[0].LastError != "bad card" || l.Letters[0].Reason != queue.ReasonRejected.String() || l.Letters[0].ID != bad.ID {
		t.Fatalf("dead letters %+v", l.Letters)
	}
	res = postAction(t, web.URL+"/api/actions/redrive-edited", url.Values{
		"ref": {l.Letters[0].Ref}, "kind": {"json"}, "payload": {`{"order":1,"card":"4111"}`}})
	if res.Count != 1 {
		t.Fatalf("redrive-edited: %+v", res)
	}
	got := map[string]int{}
	for len(got) < 3 {
		ds, err := billing.Poll(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			got[d.Payload] = d.Attempt
			if err := billing.Ack(d.LeaseID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got[`{"order":1,"card":"4111"}`] != 1 || got["later"] != 1 || got["now"] != 1 {
		t.Fatalf("delivered %v", got)
	}

	// Another dead letter, discarded.
	if _, err := pub.Publish(ctx, "orders", "no such customer"); err != nil {
		t.Fatal(err)
	}
	ds, err = billing.Poll(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatal(ds, err)
	}
	if err := billing.Reject(ds[0].LeaseID, errors.New("no such customer")); err != nil {
		t.Fatal(err)
	}
	res = postAction(t, web.URL+"/api/actions/discard", url.Values{"all": {"yes"}, "error": {"customer"}})
	if res.Count != 1 {
		t.Fatalf("discard: %+v", res)
	}
	if dls, err := pgleasebus.DeadLetters(ctx, e.bus, queue.StringCodec()); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after the discard: %+v, %v", dls, err)
	}

	// Paused from the console: the handle's Stats say so, and a Poll
	// leases nothing until resumed.
	postAction(t, web.URL+"/api/actions/pause", url.Values{"topic": {"orders"}, "name": {"billing"}})
	if _, err := pub.Publish(ctx, "orders", "while paused"); err != nil {
		t.Fatal(err)
	}
	if st, err := billing.Stats(ctx); err != nil || !st.Paused || st.Visible != 1 {
		t.Fatalf("stats while paused: %v, %v", st, err)
	}
	if ds := billing.TryPoll(1); len(ds) != 0 {
		t.Fatalf("leased while paused: %+v", ds)
	}
	postAction(t, web.URL+"/api/actions/resume", url.Values{"topic": {"orders"}, "name": {"billing"}})
	if ds := billing.TryPoll(1); len(ds) != 1 || ds[0].Payload != "while paused" {
		t.Fatalf("after resume: %+v", ds)
	}
}

func TestConsoleBackendRefusesNilBus(t *testing.T) {
	if _, err := pgleasebus.ConsoleBackend[string](nil, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatal(err)
	}
}
