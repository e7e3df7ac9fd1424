package sqsserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// A message not deleted within its visibility timeout comes back, exactly
// at the deadline, with its receive count raised; the handle of the first
// receive no longer changes anything.
func TestVisibilityTimeoutRedelivers(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "jobs", map[string]string{"VisibilityTimeout": "30"})
	sent := send(t, c, url, "resize")

	first := receive(t, c, url, 1)
	if len(first) != 1 || aws.ToString(first[0].MessageId) != aws.ToString(sent.MessageId) {
		t.Fatalf("first receive: %v", bodies(first))
	}
	if got := first[0].Attributes["ApproximateReceiveCount"]; got != "1" {
		t.Fatalf("ApproximateReceiveCount %q, want 1", got)
	}
	srv.Clock.Add(30*time.Second - time.Millisecond)
	if ms := receive(t, c, url, 1); len(ms) != 0 {
		t.Fatalf("visible before its visibility timeout: %v", bodies(ms))
	}
	srv.Clock.Add(time.Millisecond)
	again := receive(t, c, url, 1)
	if len(again) != 1 {
		t.Fatal("not visible again at its deadline")
	}
	if got := again[0].Attributes["ApproximateReceiveCount"]; got != "2" {
		t.Fatalf("ApproximateReceiveCount %q, want 2", got)
	}
	if a, b := first[0].Attributes["ApproximateFirstReceiveTimestamp"], again[0].Attributes["ApproximateFirstReceiveTimestamp"]; a != b || a == "" {
		t.Fatalf("ApproximateFirstReceiveTimestamp %q then %q: want the first receive's, kept", a, b)
	}
	if aws.ToString(first[0].ReceiptHandle) == aws.ToString(again[0].ReceiptHandle) {
		t.Fatal("the same receipt handle twice")
	}

	// The stale handle: ChangeMessageVisibility fails, DeleteMessage
	// succeeds and deletes nothing (as SQS documents).
	_, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle, VisibilityTimeout: 60})
	wantCode(t, err, "AWS.SimpleQueueService.MessageNotInflight")
	must[*sqs.DeleteMessageOutput](t)(c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle}))
	srv.Clock.Add(30 * time.Second)
	third := receive(t, c, url, 1)
	if len(third) != 1 || third[0].Attributes["ApproximateReceiveCount"] != "3" {
		t.Fatalf("the stale handle's delete removed the message: %v", bodies(third))
	}
	// The current handle deletes it; deleting again succeeds too.
	for range 2 {
		must[*sqs.DeleteMessageOutput](t)(c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: third[0].ReceiptHandle}))
	}
	srv.Clock.Add(time.Hour)
	if ms := receive(t, c, url, 10); len(ms) != 0 {
		t.Fatalf("deleted message came back: %v", bodies(ms))
	}
}

// ChangeMessageVisibility: > 0 moves the deadline from now, 0 makes the
// message visible at once with the receive counted, after the deadline it
// is MessageNotInflight, and 12 hours from the receive is the limit.
func TestChangeMessageVisibility(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", nil)
	send(t, c, url, "a")
	m := receive(t, c, url, 1)[0]
	srv.Clock.Add(20 * time.Second)
	must[*sqs.ChangeMessageVisibilityOutput](t)(c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 100}))
	srv.Clock.Add(100*time.Second - time.Nanosecond)
	if ms := receive(t, c, url, 1); len(ms) != 0 {
		t.Fatal("visible before the extended deadline")
	}
	_, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 43200})
	wantCode(t, err, "InvalidParameterValue") // 12 h from the receive, 2 min ago
	_, err = c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 43201})
	wantCode(t, err, "InvalidParameterValue")
	must[*sqs.ChangeMessageVisibilityOutput](t)(c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}))
	again := receive(t, c, url, 1)
	if len(again) != 1 || again[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("after a change to 0: %v", again)
	}
	srv.Clock.Add(30 * time.Second) // past the second receive's deadline
	_, err = c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: again[0].ReceiptHandle, VisibilityTimeout: 10})
	wantCode(t, err, "AWS.SimpleQueueService.MessageNotInflight")
	third := receive(t, c, url, 1)[0]
	must[*sqs.DeleteMessageOutput](t)(c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: third.ReceiptHandle}))
	_, err = c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: third.ReceiptHandle, VisibilityTimeout: 10})
	wantCode(t, err, "InvalidParameterValue") // deleted: "Message does not exist"
}

// A receive's own VisibilityTimeout wins over the queue's; 0 leaves the
// message visible, its receive counted.
func TestReceiveVisibilityTimeout(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", map[string]string{"VisibilityTimeout": "600"})
	send(t, c, url, "a")
	out := must[*sqs.ReceiveMessageOutput](t)(c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), VisibilityTimeout: 5}))
	if len(out.Messages) != 1 {
		t.Fatal("nothing received")
	}
	srv.Clock.Add(5 * time.Second)
	if len(receive(t, c, url, 1)) != 1 {
		t.Fatal("the receive's 5 s visibility timeout did not apply")
	}
	srv.Clock.Add(600 * time.Second)
	// boto3 can send an explicit 0; the Go SDK leaves 0 out, so ask raw.
	raw := rawCall(t, srv.URL, "ReceiveMessage", `{"QueueUrl":"`+url+`","VisibilityTimeout":0,"AttributeNames":["All"]}`)
	if raw.status != 200 || !strings.Contains(raw.body, `"ApproximateReceiveCount":"3"`) {
		t.Fatalf("receive with visibility 0, older AttributeNames: %d %s", raw.status, raw.body)
	}
	ms := receive(t, c, url, 1)
	if len(ms) != 1 || ms[0].Attributes["ApproximateReceiveCount"] != "4" {
		t.Fatalf("after a 0 visibility receive: %v", ms)
	}
}
