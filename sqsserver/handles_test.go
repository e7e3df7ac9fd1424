package sqsserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func changeVisibility(c *sqs.Client, url string, m types.Message, vis int32) error {
	_, err := c.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: vis})
	return err
}

func deleteMessage(c *sqs.Client, url string, m types.Message) error {
	_, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
	return err
}

// counts returns ApproximateNumberOfMessages and …NotVisible.
func counts(t *testing.T, c *sqs.Client, url string) (visible, inFlight string) {
	t.Helper()
	out := must[*sqs.GetQueueAttributesOutput](t)(c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}}))
	return out.Attributes["ApproximateNumberOfMessages"], out.Attributes["ApproximateNumberOfMessagesNotVisible"]
}

// After ChangeMessageVisibility to 0 the message is visible at once and
// its receive counted, and, as in AWS, the handle of that receive still
// deletes it until the message is received again.
func TestDeleteAfterVisibilityResetDeletes(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q", nil)
	send(t, c, url, "a")
	m := receive(t, c, url, 1)[0]
	if err := changeVisibility(c, url, m, 0); err != nil {
		t.Fatal(err)
	}
	if err := deleteMessage(c, url, m); err != nil {
		t.Fatal(err)
	}
	if v, f := counts(t, c, url); v != "0" || f != "0" {
		t.Fatalf("after the delete: %s visible, %s in flight", v, f)
	}
	if ms := receive(t, c, url, 10); len(ms) != 0 {
		t.Fatalf("deleted with the handle of the reset receive, yet received: %v", bodies(ms))
	}
	// The delete is idempotent, and the handle changes no visibility now:
	// the message is gone.
	if err := deleteMessage(c, url, m); err != nil {
		t.Fatal(err)
	}
	wantCode(t, changeVisibility(c, url, m, 10), "InvalidParameterValue")
	srv.Clock.Add(time.Hour)
	if ms := receive(t, c, url, 10); len(ms) != 0 {
		t.Fatalf("came back: %v", bodies(ms))
	}

	// Received again after the reset: the old handle deletes nothing.
	send(t, c, url, "b")
	first := receive(t, c, url, 1)[0]
	if err := changeVisibility(c, url, first, 0); err != nil {
		t.Fatal(err)
	}
	second := receive(t, c, url, 1)[0]
	if err := deleteMessage(c, url, first); err != nil {
		t.Fatal(err)
	}
	if v, f := counts(t, c, url); v != "0" || f != "1" {
		t.Fatalf("the old handle's delete: %s visible, %s in flight, want 0 and 1", v, f)
	}
	srv.Clock.Add(30 * time.Second)
	third := receive(t, c, url, 1)
	if len(third) != 1 || third[0].Attributes["ApproximateReceiveCount"] != "3" {
		t.Fatalf("the old handle deleted the message received again: %v", third)
	}
	_ = second
}

// A receive with VisibilityTimeout 0 leaves the message visible, and its
// handle deletes it while nobody has received it since.
func TestDeleteAfterZeroVisibilityReceive(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q", nil)
	send(t, c, url, "a")
	// The Go SDK leaves a 0 out: ask raw, as boto3 and the JS SDK send it.
	raw := rawCall(t, srv.URL, "ReceiveMessage", `{"QueueUrl":"`+url+`","VisibilityTimeout":0}`)
	i := strings.Index(raw.body, `"ReceiptHandle":"`)
	if raw.status != 200 || i < 0 {
		t.Fatalf("%d %s", raw.status, raw.body)
	}
	h := raw.body[i+len(`"ReceiptHandle":"`):]
	h = h[:strings.IndexByte(h, '"')]
	if err := deleteMessage(c, url, types.Message{ReceiptHandle: aws.String(h)}); err != nil {
		t.Fatal(err)
	}
	if ms := receive(t, c, url, 10); len(ms) != 0 {
		t.Fatalf("deleted with the handle of a 0-visibility receive, yet received: %v", bodies(ms))
	}
}

// A message deleted after a reset is never handed out again: a short poll
// of one returns the next message instead of nothing, a long poll keeps
// waiting, and a move task leaves it out.
func TestDeletedAfterResetSkipped(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q", nil)
	send(t, c, url, "a")
	send(t, c, url, "b")
	a := receive(t, c, url, 1)[0]
	if err := changeVisibility(c, url, a, 0); err != nil {
		t.Fatal(err)
	}
	if err := deleteMessage(c, url, a); err != nil {
		t.Fatal(err)
	}
	if ms := receive(t, c, url, 1); len(ms) != 1 || aws.ToString(ms[0].Body) != "b" {
		t.Fatalf("a receive of 1 after a's delete: %v, want b", bodies(ms))
	}

	send(t, c, url, "c")
	cm := receive(t, c, url, 1)[0]
	if err := changeVisibility(c, url, cm, 0); err != nil {
		t.Fatal(err)
	}
	if err := deleteMessage(c, url, cm); err != nil {
		t.Fatal(err)
	}
	ch := longPoll(ctxFor(t), c, url, 20)
	srv.AwaitParked(t, "q", 1)
	send(t, c, url, "d")
	if r := await(t, ch); r.err != nil || len(r.ms) != 1 || aws.ToString(r.ms[0].Body) != "d" {
		t.Fatalf("long poll: %v %v, want d only", r.err, bodies(r.ms))
	}
}

// A move task does not bring back a dead letter deleted after a reset.
func TestMoveTaskSkipsDeletedAfterReset(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	dlq := srv.CreateQueue(t, "dlq", nil)
	dlqArn := queueArn(t, c, dlq)
	src := srv.CreateQueue(t, "src", map[string]string{
		"VisibilityTimeout": "10", "RedrivePolicy": `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":1}`})
	send(t, c, src, "poison")
	receive(t, c, src, 1)
	srv.Clock.Add(10 * time.Second)
	if ms := receive(t, c, src, 1); len(ms) != 0 {
		t.Fatal("not moved to the DLQ")
	}
	d := receive(t, c, dlq, 1)[0]
	if err := changeVisibility(c, dlq, d, 0); err != nil {
		t.Fatal(err)
	}
	if err := deleteMessage(c, dlq, d); err != nil {
		t.Fatal(err)
	}
	must[*sqs.StartMessageMoveTaskOutput](t)(c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(dlqArn)}))
	tasks := must[*sqs.ListMessageMoveTasksOutput](t)(c.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(dlqArn)}))
	if len(tasks.Results) != 1 || tasks.Results[0].ApproximateNumberOfMessagesMoved != 0 || aws.ToInt64(tasks.Results[0].ApproximateNumberOfMessagesToMove) != 0 {
		t.Fatalf("task %+v", tasks.Results)
	}
	if ms := receive(t, c, src, 10); len(ms) != 0 {
		t.Fatalf("the deleted dead letter was moved back: %v", bodies(ms))
	}
}

// On a FIFO queue a receipt handle expires with its visibility timeout, as
// AWS documents it: DeleteMessage with it is InvalidParameterValue ("The
// receipt handle has expired") and deletes nothing, also after a change
// to 0; a handle whose visibility was extended still deletes within it.
func TestFIFOHandleExpires(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "10"})
	sendGroup(t, c, url, "a", "g", "d1")
	m := receive(t, c, url, 1)[0]
	srv.Clock.Add(10 * time.Second)
	err := deleteMessage(c, url, m)
	wantCode(t, err, "InvalidParameterValue")
	if !strings.Contains(err.Error(), "The receipt handle has expired") {
		t.Fatalf("message: %v", err)
	}
	again := receive(t, c, url, 1)
	if len(again) != 1 || again[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("the refused delete removed the message: %v", again)
	}
	wantCode(t, deleteMessage(c, url, m), "InvalidParameterValue") // received again since

	// Extended past its first deadline, the handle deletes within the new one.
	srv.Clock.Add(5 * time.Second)
	if err := changeVisibility(c, url, again[0], 20); err != nil {
		t.Fatal(err)
	}
	srv.Clock.Add(19 * time.Second)
	if err := deleteMessage(c, url, again[0]); err != nil {
		t.Fatalf("delete within the extended visibility: %v", err)
	}
	if ms := receive(t, c, url, 1); len(ms) != 0 {
		t.Fatalf("not deleted: %v", bodies(ms))
	}

	// A change to 0 ends the handle's visibility: it no longer deletes; a
	// batch reports it per entry, beside the current handle that does.
	sendGroup(t, c, url, "b", "g", "d2")
	b := receive(t, c, url, 1)[0]
	if err := changeVisibility(c, url, b, 0); err != nil {
		t.Fatal(err)
	}
	wantCode(t, deleteMessage(c, url, b), "InvalidParameterValue")
	b2 := receive(t, c, url, 1)[0]
	out := must[*sqs.DeleteMessageBatchOutput](t)(c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("old"), ReceiptHandle: b.ReceiptHandle}, {Id: aws.String("new"), ReceiptHandle: b2.ReceiptHandle}}}))
	if len(out.Successful) != 1 || aws.ToString(out.Successful[0].Id) != "new" ||
		len(out.Failed) != 1 || aws.ToString(out.Failed[0].Id) != "old" || aws.ToString(out.Failed[0].Code) != "InvalidParameterValue" {
		t.Fatalf("batch %+v", out)
	}
	// Deleting again with the handle that deleted it succeeds.
	if err := deleteMessage(c, url, b2); err != nil {
		t.Fatal(err)
	}
}
