package sqsserver_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// deadLetters fills a DLQ with n messages moved there by jobs' redrive
// policy, and returns the DLQ's URL and ARN and jobs' URL.
func deadLetters(t *testing.T, n int) (s *sqstest.Server, c *sqs.Client, dlq, dlqArn, src string) {
	t.Helper()
	s, c = start(t)
	dlq = s.CreateQueue(t, "dlq", nil)
	dlqArn = queueArn(t, c, dlq)
	src = s.CreateQueue(t, "jobs", map[string]string{"VisibilityTimeout": "5",
		"RedrivePolicy": `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":"1"}`})
	ctx := context.Background()
	for i := range n {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &src, MessageBody: aws.String("m" + strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for len(receive(t, c, src, 10)) > 0 { // the first receive of each
	}
	s.Clock.Add(5 * time.Second)
	receive(t, c, src, 10) // the second receive moves them all
	return s, c, dlq, dlqArn, src
}

func taskStatus(t *testing.T, c *sqs.Client, dlqArn string) (string, int64) {
	t.Helper()
	out := must[*sqs.ListMessageMoveTasksOutput](t)(c.ListMessageMoveTasks(context.Background(), &sqs.ListMessageMoveTasksInput{SourceArn: &dlqArn}))
	if len(out.Results) == 0 {
		t.Fatal("no task")
	}
	return aws.ToString(out.Results[0].Status), out.Results[0].ApproximateNumberOfMessagesMoved
}

// A task with MaxNumberOfMessagesPerSecond moves that many at once and as
// many more at each second of the server's clock, exactly, and a cancel
// stops it where it is.
func TestMoveTaskAtItsRateOnTheClock(t *testing.T) {
	srv, c, _, dlqArn, src := deadLetters(t, 5)
	ctx := context.Background()
	task := must[*sqs.StartMessageMoveTaskOutput](t)(c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{
		SourceArn: &dlqArn, MaxNumberOfMessagesPerSecond: aws.Int32(2)}))
	if st, n := taskStatus(t, c, dlqArn); st != "RUNNING" || n != 2 {
		t.Fatalf("at the start: %s, %d moved", st, n)
	}
	_, err := c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: &dlqArn})
	wantCode(t, err, "InvalidParameterValue") // one task per source at a time
	srv.Clock.Add(999 * time.Millisecond)
	if _, n := taskStatus(t, c, dlqArn); n != 2 {
		t.Fatalf("before the second: %d moved", n)
	}
	srv.Clock.Add(time.Millisecond)
	if st, n := taskStatus(t, c, dlqArn); st != "RUNNING" || n != 4 {
		t.Fatalf("after a second: %s, %d moved", st, n)
	}
	out := must[*sqs.CancelMessageMoveTaskOutput](t)(c.CancelMessageMoveTask(ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: task.TaskHandle}))
	if out.ApproximateNumberOfMessagesMoved != 4 {
		t.Fatalf("cancel says %d moved", out.ApproximateNumberOfMessagesMoved)
	}
	srv.Clock.Add(10 * time.Second)
	if st, n := taskStatus(t, c, dlqArn); st != "CANCELLED" || n != 4 {
		t.Fatalf("after the cancel: %s, %d moved", st, n)
	}
	if got := len(receive(t, c, src, 10)); got != 4 {
		t.Fatalf("the source got %d back", got)
	}
	_, err = c.CancelMessageMoveTask(ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: task.TaskHandle})
	wantCode(t, err, "ResourceNotFoundException")
}

// With no one asking, the task's own wake-up moves the messages when the
// clock reaches each second: a long poll on the source is woken by it.
func TestMoveTaskRunsInTheBackground(t *testing.T) {
	s, c := start(t)
	ctx := context.Background()
	dlq := s.CreateQueue(t, "dlq", nil)
	dlqArn := queueArn(t, c, dlq)
	src := s.CreateQueue(t, "jobs", map[string]string{"VisibilityTimeout": "5",
		"RedrivePolicy": `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":"1"}`})
	for i := range 2 {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &src, MessageBody: aws.String("m" + strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, c, src, 10)
	s.Clock.Add(5 * time.Second)
	receive(t, c, src, 10) // both to the DLQ
	must[*sqs.StartMessageMoveTaskOutput](t)(c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{
		SourceArn: &dlqArn, MaxNumberOfMessagesPerSecond: aws.Int32(1)}))
	first := receive(t, c, src, 10)
	if len(first) != 1 {
		t.Fatalf("at the start the source got %d", len(first))
	}
	got := make(chan int, 1)
	go func() {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &src, WaitTimeSeconds: 20, MaxNumberOfMessages: 10})
		if err != nil {
			got <- -1
			return
		}
		got <- len(out.Messages)
	}()
	s.AwaitParked(t, "jobs", 1)
	s.Clock.Add(time.Second) // no request: the task's wake-up moves the second
	if n := <-got; n != 1 {
		t.Fatalf("the long poll got %d", n)
	}
	if st, n := taskStatus(t, c, dlqArn); st != "COMPLETED" || n != 2 {
		t.Fatalf("%s, %d moved", st, n)
	}
}
