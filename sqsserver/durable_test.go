package sqsserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// A durable server opened again on its directory has its queues, their
// attributes and tags, and its messages: those in flight visible again with
// their receive counted, receipt handles still authentic, FIFO sequence
// numbers still growing; a deleted queue stays deleted.
func TestDurableRestart(t *testing.T) {
	dir := t.TempDir()
	mock := clock.NewMock()
	mock.Set(sqstest.Epoch)
	srv := sqstest.StartWithClock(t, mock, sqsserver.WithDir(dir), sqsserver.WithSync(broker.SyncNone))
	ctx := context.Background()
	c := srv.Client
	dlq := srv.CreateQueue(t, "dlq", nil)
	url := srv.CreateQueue(t, "jobs", map[string]string{
		"VisibilityTimeout": "77", "DelaySeconds": "5",
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":4}`,
	})
	fifo := srv.CreateQueue(t, "f.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	gone := srv.CreateQueue(t, "gone", nil)
	must[*sqs.TagQueueOutput](t)(c.TagQueue(ctx, &sqs.TagQueueInput{QueueUrl: aws.String(url), Tags: map[string]string{"team": "a"}}))
	must[*sqs.DeleteQueueOutput](t)(c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(gone)}))
	must[*sqs.SendMessageOutput](t)(c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("leased"),
		MessageAttributes: map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}}}))
	send(t, c, url, "waiting")
	seq1 := aws.ToString(sendGroup(t, c, fifo, "f1", "g", "").SequenceNumber)
	mock.Add(5 * time.Second)
	leased := receive(t, c, url, 1)[0]
	_ = dlq
	srv.Close()

	srv = sqstest.StartWithClock(t, mock, sqsserver.WithDir(dir))
	c = srv.Client
	list := must[*sqs.ListQueuesOutput](t)(c.ListQueues(ctx, &sqs.ListQueuesInput{}))
	if len(list.QueueUrls) != 3 {
		t.Fatalf("queues after restart: %v", list.QueueUrls)
	}
	attrs := must[*sqs.GetQueueAttributesOutput](t)(c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"All"}})).Attributes
	if attrs["VisibilityTimeout"] != "77" || attrs["DelaySeconds"] != "5" || !strings.Contains(attrs["RedrivePolicy"], `"maxReceiveCount":4`) {
		t.Fatalf("attributes after restart: %v", attrs)
	}
	if tags := must[*sqs.ListQueueTagsOutput](t)(c.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: aws.String(url)})).Tags; tags["team"] != "a" {
		t.Fatalf("tags %v", tags)
	}
	// The old handle is authentic: deleting with it succeeds (its lease is
	// gone, so it deletes nothing).
	must[*sqs.DeleteMessageOutput](t)(c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: leased.ReceiptHandle}))
	ms := receive(t, c, url, 10)
	got := map[string]types.Message{}
	for _, m := range ms {
		got[aws.ToString(m.Body)] = m
	}
	if len(ms) != 2 || got["leased"].Attributes["ApproximateReceiveCount"] != "2" || got["waiting"].Attributes["ApproximateReceiveCount"] != "1" ||
		aws.ToString(got["leased"].MessageAttributes["k"].StringValue) != "v" || aws.ToString(got["leased"].MessageId) != aws.ToString(leased.MessageId) {
		t.Fatalf("messages after restart: %v", ms)
	}
	if seq2 := aws.ToString(sendGroup(t, c, fifo, "f2", "g", "").SequenceNumber); seq2 <= seq1 {
		t.Fatalf("sequence number %s after %s", seq2, seq1)
	}
	// The dedup window survives too.
	if dup := sendGroup(t, c, fifo, "f1", "g", ""); aws.ToString(dup.SequenceNumber) != seq1 {
		t.Fatalf("dedup lost in the restart: %s", aws.ToString(dup.SequenceNumber))
	}
	_, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("gone")})
	wantCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")

	// A second server on the same directory is refused.
	if _, err := sqsserver.New(sqsserver.WithDir(dir)); err == nil {
		t.Fatal("two servers on one directory")
	}
}

// The server's Go methods return *sqsserver.Error values that errors.Is
// matches against the sentinels.
func TestGoErrors(t *testing.T) {
	srv := sqstest.Start(t)
	err := srv.Server.AwaitParked(context.Background(), "missing", 1)
	var e *sqsserver.Error
	if !errors.Is(err, sqsserver.ErrQueueDoesNotExist) || errors.Is(err, sqsserver.ErrReceiptHandleIsInvalid) || !errors.As(err, &e) || e.Status != 400 {
		t.Fatalf("%v", err)
	}
}

// Bad options are errors, not panics.
func TestNewRefusesBadOptions(t *testing.T) {
	for name, o := range map[string]sqsserver.Option{
		"nil clock":    sqsserver.WithClock(nil),
		"empty dir":    sqsserver.WithDir(""),
		"region":       sqsserver.WithRegion("Not A Region"),
		"account":      sqsserver.WithAccountID("123"),
		"base url":     sqsserver.WithBaseURL("localhost:9324"),
		"no keys":      sqsserver.WithAccessKeys(),
		"empty key":    sqsserver.WithAccessKeys(""),
		"short secret": sqsserver.WithReceiptKey([]byte("short")),
		"sync only":    sqsserver.WithSync(broker.SyncNone),
		"zero":         {},
	} {
		if s, err := sqsserver.New(o); err == nil {
			s.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

// Region, account and base URL shape the URLs and ARNs.
func TestRegionAccountBaseURL(t *testing.T) {
	srv := sqstest.Start(t, sqsserver.WithRegion("eu-west-1"), sqsserver.WithAccountID("123456789012"), sqsserver.WithBaseURL("http://sqs.local:9324/"))
	url := srv.CreateQueue(t, "q", nil)
	if url != "http://sqs.local:9324/123456789012/q" {
		t.Fatal(url)
	}
	// The host named does not matter: the queue is found by name.
	send(t, srv.Client, url, "x")
	if arn := queueArn(t, srv.Client, url); arn != "arn:aws:sqs:eu-west-1:123456789012:q" {
		t.Fatal(arn)
	}
}

type clockJSON struct {
	Now   string `json:"now"`
	Mock  bool   `json:"mock"`
	Error string `json:"error"`
}

func control(t *testing.T, method, url string) (int, clockJSON) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c clockJSON
	_ = json.NewDecoder(resp.Body).Decode(&c)
	return resp.StatusCode, c
}

// The control endpoint reads and moves a mock clock, never backwards, and
// refuses to move a real one; /leasebus/parked waits for long polls.
func TestControlEndpoint(t *testing.T) {
	srv, c := start(t)
	if st, r := control(t, "GET", srv.URL+"/leasebus/clock"); st != 200 || r.Now != "2026-01-01T00:00:00Z" || !r.Mock {
		t.Fatalf("%d %+v", st, r)
	}
	if st, r := control(t, "POST", srv.URL+"/leasebus/clock?advance=1m30s"); st != 200 || r.Now != "2026-01-01T00:01:30Z" {
		t.Fatalf("%d %+v", st, r)
	}
	if !srv.Clock.Now().Equal(sqstest.Epoch.Add(90 * time.Second)) {
		t.Fatal("the mock did not move")
	}
	if st, r := control(t, "POST", srv.URL+"/leasebus/clock?set=2026-02-01T00:00:00Z"); st != 200 || r.Now != "2026-02-01T00:00:00Z" {
		t.Fatalf("%d %+v", st, r)
	}
	for _, q := range []string{"set=2025-01-01T00:00:00Z", "advance=-1s", "advance=soon", "", "advance=1s&set=2027-01-01T00:00:00Z"} {
		if st, r := control(t, "POST", srv.URL+"/leasebus/clock?"+q); st != 400 || r.Error == "" {
			t.Errorf("%s: %d %+v", q, st, r)
		}
	}
	if st, _ := control(t, "GET", srv.URL+"/leasebus/nothing"); st != 404 {
		t.Errorf("unknown endpoint: %d", st)
	}

	url := srv.CreateQueue(t, "q", nil)
	ch := longPoll(ctxFor(t), c, url, 20)
	if st, _ := control(t, "GET", srv.URL+"/leasebus/parked?queue=q&n=1"); st != 200 {
		t.Fatalf("parked: %d", st)
	}
	if st, r := control(t, "POST", srv.URL+"/leasebus/clock?advance=20s"); st != 200 {
		t.Fatalf("%d %+v", st, r)
	}
	if r := await(t, ch); r.err != nil || len(r.ms) != 0 {
		t.Fatalf("the poll after 20 s: %v %v", r.err, r.ms)
	}
	if st, _ := control(t, "GET", srv.URL+"/leasebus/parked?queue=missing&n=1"); st != 404 {
		t.Fatalf("parked on a missing queue: %d", st)
	}

	real, err := sqsserver.New()
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	hs := sqstest.StartWithClock(t, clock.NewMock()) // only for its HTTP plumbing
	hs.HTTP.Config.Handler = real
	if st, r := control(t, "POST", hs.URL+"/leasebus/clock?advance=1s"); st != 409 || r.Mock {
		t.Fatalf("moving a real clock: %d %+v", st, r)
	}
	if st, r := control(t, "GET", hs.URL+"/leasebus/clock"); st != 200 || r.Mock {
		t.Fatalf("reading a real clock: %d %+v", st, r)
	}
}
