package sqsserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// The console on the server's own port: the queues, a peek at their
// messages, and a pause that a ReceiveMessage sees.
func TestConsoleShowsAndPausesQueues(t *testing.T) {
	srv := sqstest.Start(t, sqsserver.WithConsole())
	ctx := context.Background()
	q := srv.CreateQueue(t, "jobs", nil)
	_, err := srv.Client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String("resize <b>cat.png</b>")})
	if err != nil {
		t.Fatal(err)
	}

	var o console.Overview
	getJSON(t, srv.URL+"/leasebus/console/api/overview", &o)
	if len(o.Subscriptions) != 1 || o.Subscriptions[0].Topic != "jobs" || o.Subscriptions[0].Visible != 1 {
		t.Fatalf("overview: %+v", o.Subscriptions)
	}
	sub := o.Subscriptions[0]
	var v console.SubscriptionView
	getJSON(t, srv.URL+"/leasebus/console/api/subscription?"+url.Values{"topic": {sub.Topic}, "name": {sub.Name}}.Encode(), &v)
	if len(v.Messages) != 1 || !strings.Contains(v.Messages[0].Payload.Text, "resize <b>cat.png</b>") {
		t.Fatalf("peek: %+v", v.Messages)
	}
	resp, err := http.Get(srv.URL + "/leasebus/console/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), `href="/leasebus/console/subscription?`) {
		t.Fatalf("page %d: %s", resp.StatusCode, page)
	}

	form := url.Values{"topic": {sub.Topic}, "name": {sub.Name}}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/leasebus/console/api/actions/pause", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pause: %d", resp.StatusCode)
	}
	out, err := srv.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 0 {
		t.Fatalf("a paused queue delivered %v", out.Messages)
	}
}

// Without WithConsole there is none.
func TestNoConsoleByDefault(t *testing.T) {
	srv := sqstest.Start(t)
	resp, err := http.Get(srv.URL + "/leasebus/console/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
