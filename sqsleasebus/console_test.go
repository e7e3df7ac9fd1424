package sqsleasebus_test

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

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
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

// On call, from the console alone over SQS: the queues with their counts
// and settings from SQS's attributes, why a message died, its payload
// fixed and redriven, another discarded.
func TestConsoleOverSQS(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	billing := withDLQ(t, srv, "billing", 2)
	plain := srv.CreateQueue(t, "plain", nil)
	audit, err := sqsleasebus.Subscribe[string](ctx, srv.Client, plain, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Close()
	rejectAll(t, srv, billing, `{"order":1,"card":"0000"}`)
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishBatch(ctx, topicOf(billing.QueueURL()), []string{"waiting 1", "waiting 2"}); err != nil {
		t.Fatal(err)
	}

	be, err := sqsleasebus.ConsoleBackend(billing, audit)
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
	if len(rows) != 2 || rows["sqs/billing"].Visible != 2 || rows["sqs/plain"].Visible != 0 || o.DeadLetters.Held != 1 {
		t.Fatalf("overview %+v", o)
	}
	if !strings.Contains(rows["sqs/billing"].Note, "1 in the dead-letter queue") {
		t.Fatalf("billing's note %q", rows["sqs/billing"].Note)
	}
	status, page := httpGet(t, web.URL+"/subscription?topic=sqs&name=billing")
	if status != http.StatusOK || !strings.Contains(page, "<th>WithMaxAttempts</th><td>2</td>") || !strings.Contains(page, "<th>WithVisibilityTimeout</th><td>30s</td>") {
		t.Fatalf("billing's page: %d\n%s", status, page)
	}
	if status, _ := httpGet(t, web.URL+"/subscription?topic=sqs&name=nobody"); status != http.StatusNotFound {
		t.Fatalf("an unknown queue's page: %d", status)
	}

	var l console.DeadLetterList
	getJSON(t, web.URL+"/api/dead-letters", &l)
	if len(l.Letters) != 1 || l.Letters[0].LastError != `bad {"order":1,"card":"0000"}` || l.Letters[0].Reason != queue.ReasonRejected.String() {
		t.Fatalf("dead letters %+v", l.Letters)
	}
	res := postAction(t, web.URL+"/api/actions/redrive-edited", url.Values{
		"ref": {l.Letters[0].Ref}, "kind": {"json"}, "payload": {`{"order":1,"card":"4111"}`}})
	if res.Count != 1 {
		t.Fatalf("redrive-edited: %+v", res)
	}
	got := pollAll(t, billing, 3)
	fixed := false
	for _, d := range got {
		fixed = fixed || d.Payload == `{"order":1,"card":"4111"}`
	}
	if !fixed {
		t.Fatalf("delivered %+v, without the fixed payload", got)
	}

	rejectAll(t, srv, billing, "no such customer")
	res = postAction(t, web.URL+"/api/actions/discard", url.Values{"all": {"yes"}, "error": {"customer"}})
	if res.Count != 1 {
		t.Fatalf("discard: %+v", res)
	}
	if n, err := billing.DeadLetterDepth(ctx); err != nil || n != 0 {
		t.Fatalf("dead-letter queue after the discard: %d, %v", n, err)
	}
}

func TestConsoleBackendRefusesBadArguments(t *testing.T) {
	srv := sqstest.Start(t)
	sub := withDLQ(t, srv, "q", 2)
	for name, subs := range map[string][]*sqsleasebus.Subscription[string]{
		"none": nil, "nil": {nil}, "twice": {sub, sub},
	} {
		if _, err := sqsleasebus.ConsoleBackend(subs...); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
