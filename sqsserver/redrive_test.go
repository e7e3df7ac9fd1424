package sqsserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func queueArn(t *testing.T, c *sqs.Client, url string) string {
	t.Helper()
	out := must[*sqs.GetQueueAttributesOutput](t)(c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}}))
	return out.Attributes["QueueArn"]
}

// A message received maxReceiveCount times moves to the dead-letter queue
// on the receive that would exceed it, keeping its MessageId,
// SentTimestamp and attributes; StartMessageMoveTask brings it back.
func TestRedriveToDeadLetterQueueAndBack(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	dlq := srv.CreateQueue(t, "jobs-dlq", nil)
	dlqArn := queueArn(t, c, dlq)
	src := srv.CreateQueue(t, "jobs", map[string]string{
		"VisibilityTimeout": "10",
		"RedrivePolicy":     `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":"2"}`,
	})
	srcArn := queueArn(t, c, src)
	sent := must[*sqs.SendMessageOutput](t)(c.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(src), MessageBody: aws.String("poison"),
		MessageAttributes: map[string]types.MessageAttributeValue{"kind": {DataType: aws.String("String"), StringValue: aws.String("p")}},
	}))
	sentAt := ""
	for i := 1; i <= 2; i++ {
		ms := receive(t, c, src, 1)
		if len(ms) != 1 {
			t.Fatalf("receive %d: nothing", i)
		}
		sentAt = ms[0].Attributes["SentTimestamp"]
		srv.Clock.Add(10 * time.Second)
	}
	if ms := receive(t, c, src, 1); len(ms) != 0 { // the 3rd receive moves it
		t.Fatalf("received a third time: %v", ms[0].Attributes)
	}
	dead := receive(t, c, dlq, 1)
	if len(dead) != 1 {
		t.Fatal("not in the dead-letter queue")
	}
	d := dead[0]
	if aws.ToString(d.MessageId) != aws.ToString(sent.MessageId) || d.Attributes["SentTimestamp"] != sentAt ||
		d.Attributes["DeadLetterQueueSourceArn"] != srcArn || d.Attributes["ApproximateReceiveCount"] != "1" ||
		aws.ToString(d.MessageAttributes["kind"].StringValue) != "p" {
		t.Fatalf("dead letter %+v", d)
	}
	srcs := must[*sqs.ListDeadLetterSourceQueuesOutput](t)(c.ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(dlq)}))
	if len(srcs.QueueUrls) != 1 || srcs.QueueUrls[0] != src {
		t.Fatalf("dead-letter sources %v", srcs.QueueUrls)
	}

	// Back to where it came from: the message is visible in the DLQ again
	// once its 30 s pass.
	srv.Clock.Add(30 * time.Second)
	task := must[*sqs.StartMessageMoveTaskOutput](t)(c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(dlqArn)}))
	if aws.ToString(task.TaskHandle) == "" {
		t.Fatal("no task handle")
	}
	tasks := must[*sqs.ListMessageMoveTasksOutput](t)(c.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(dlqArn)}))
	if len(tasks.Results) != 1 || aws.ToString(tasks.Results[0].Status) != "COMPLETED" || tasks.Results[0].ApproximateNumberOfMessagesMoved != 1 {
		t.Fatalf("tasks %+v", tasks.Results)
	}
	_, err := c.CancelMessageMoveTask(ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: task.TaskHandle})
	wantCode(t, err, "ResourceNotFoundException")
	back := receive(t, c, src, 1)
	if len(back) != 1 || aws.ToString(back[0].MessageId) != aws.ToString(sent.MessageId) || back[0].Attributes["ApproximateReceiveCount"] != "1" {
		t.Fatalf("after the move: %v", back)
	}
	if _, ok := back[0].Attributes["DeadLetterQueueSourceArn"]; ok {
		t.Fatal("a moved-back message still names a dead-letter source")
	}
	if ms := receive(t, c, dlq, 1); len(ms) != 0 {
		t.Fatal("the moved message is still in the DLQ")
	}

	// To an explicit destination.
	other := srv.CreateQueue(t, "other", nil)
	srv.Clock.Add(10 * time.Second)
	for range 2 {
		receive(t, c, src, 1)
		srv.Clock.Add(10 * time.Second)
	}
	receive(t, c, src, 1) // moves it
	must[*sqs.StartMessageMoveTaskOutput](t)(c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(dlqArn), DestinationArn: aws.String(queueArn(t, c, other))}))
	if ms := receive(t, c, other, 1); len(ms) != 1 {
		t.Fatal("not moved to the destination")
	}
}

// Redrive policies are checked: the target must exist and be of the same
// type, maxReceiveCount in 1..1000, and a RedriveAllowPolicy obeyed; a
// move task needs a dead-letter queue as its source.
func TestRedrivePolicyChecks(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	dlq := srv.CreateQueue(t, "dlq", map[string]string{"RedriveAllowPolicy": `{"redrivePermission":"denyAll"}`})
	dlqArn := queueArn(t, c, dlq)
	fifoDLQ := srv.CreateQueue(t, "dlq.fifo", map[string]string{"FifoQueue": "true"})
	plain := srv.CreateQueue(t, "plain", nil)
	for name, policy := range map[string]string{
		"missing target": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:nope","maxReceiveCount":3}`,
		"zero count":     `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":0}`,
		"too many":       `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":1001}`,
		"not JSON":       `{`,
		"fifo target":    `{"deadLetterTargetArn":"` + queueArn(t, c, fifoDLQ) + `","maxReceiveCount":3}`,
		"denied":         `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":3}`,
	} {
		_, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(plain), Attributes: map[string]string{"RedrivePolicy": policy}})
		if code := apiCode(err); code != "InvalidParameterValue" && code != "InvalidAttributeValue" {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(queueArn(t, c, plain))})
	wantCode(t, err, "InvalidParameterValue")
	_, err = c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String("arn:aws:sqs:us-east-1:000000000000:nope")})
	wantCode(t, err, "ResourceNotFoundException")
	// Allowed once the DLQ allows it; removed with an empty policy.
	must[*sqs.SetQueueAttributesOutput](t)(c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(dlq), Attributes: map[string]string{
		"RedriveAllowPolicy": `{"redrivePermission":"byQueue","sourceQueueArns":["` + queueArn(t, c, plain) + `"]}`}}))
	must[*sqs.SetQueueAttributesOutput](t)(c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(plain), Attributes: map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":3}`}}))
	got := must[*sqs.GetQueueAttributesOutput](t)(c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(plain), AttributeNames: []types.QueueAttributeName{"RedrivePolicy"}}))
	if want := `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":3}`; got.Attributes["RedrivePolicy"] != want {
		t.Fatalf("RedrivePolicy %q, want %q", got.Attributes["RedrivePolicy"], want)
	}
	must[*sqs.SetQueueAttributesOutput](t)(c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(plain), Attributes: map[string]string{"RedrivePolicy": ""}}))
	got = must[*sqs.GetQueueAttributesOutput](t)(c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(plain), AttributeNames: []types.QueueAttributeName{"All"}}))
	if _, ok := got.Attributes["RedrivePolicy"]; ok {
		t.Fatal("RedrivePolicy not removed")
	}
}

// Without a RedrivePolicy a message is never dead-lettered, however often
// it is received (leasebus's own default would stop at 5).
func TestNoRedrivePolicyNeverDeadLetters(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q", map[string]string{"VisibilityTimeout": "1"})
	send(t, c, url, "x")
	for i := 1; i <= 20; i++ {
		ms := receive(t, c, url, 1)
		if len(ms) != 1 {
			t.Fatalf("receive %d: gone", i)
		}
		srv.Clock.Add(time.Second)
	}
}
